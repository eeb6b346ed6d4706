"""Make the offline tokenizer and text dataset the TorchTitan example trains on.

TorchTitan's ``llama3_debugmodel`` reads a tokenizer from ``tests/assets/tokenizer`` and the
``c4_test`` dataset from ``tests/assets/c4_test``, both in TorchTitan's source repository but not
in its wheel. This script makes small stand-ins, deterministically and without any download:

- ``<out>/dataset/data.jsonl``: ``--docs`` documents (JSON lines with a ``text`` field, the shape
  ``c4_test`` has), English-like sentences from a small fixed grammar and a seeded generator;
- ``<out>/tokenizer/tokenizer.json`` + ``tokenizer_config.json``: a byte-level BPE tokenizer
  trained on that text with the ``tokenizers`` package, ``--vocab-size`` tokens (at most the
  debug model's 2048), with ``<|begin_of_text|>`` / ``<|end_of_text|>`` as BOS / EOS.

Run: ``python examples/torchtitan/make_assets.py --out /tmp/titan_assets``. The same arguments give
byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"


def _phrases(text: str) -> list[str]:
    return [p.strip() for p in text.split(",")]


_SUBJECTS = _phrases("""
    the engineer, a small robot, the river, my neighbour, the old library, a curious cat,
    the committee, every student, the morning train, a quiet village, the compiler,
    our garden, the northern wind, a young painter, the harbour master, the kernel
""")
_VERBS = _phrases("""
    builds, watches, remembers, carries, measures, follows, describes, repairs, explores,
    collects, teaches, finds, writes, opens, answers, trains
""")
_OBJECTS = _phrases("""
    a wooden bridge, the evening light, three red apples, the long report,
    a map of the coast, the broken clock, a letter from home, the first snow,
    a loaf of bread, the silent hall, an empty notebook, the tensor, the tall tower,
    a list of numbers, the summer market
""")
_TAILS = _phrases("""
    before sunrise, with great care, after the storm, in the afternoon, without a word,
    near the station, for the whole town, every other day, under the bright moon,
    at the end of the week, as the bells ring, while the tea cools
""")


def _sentence(rng: random.Random) -> str:
    s = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
    if rng.random() < 0.6:
        s += f" {rng.choice(_TAILS)}"
    return s[0].upper() + s[1:] + rng.choice([".", ".", ".", "!", "?"])


def documents(n_docs: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        docs.append(" ".join(_sentence(rng) for _ in range(rng.randint(4, 24))))
    return docs


def write_dataset(out: Path, docs: list[str]) -> Path:
    path = out / "dataset"
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "data.jsonl", "w", encoding="utf-8") as f:
        for i, text in enumerate(docs):
            f.write(json.dumps({"text": text, "id": i}) + "\n")
    return path


def write_tokenizer(out: Path, docs: list[str], vocab_size: int) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    path = out / "tokenizer"
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    config = {
        "bos_token": BOS,
        "eos_token": EOS,
        "add_bos_token": True,
        "add_eos_token": True,
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--docs", type=int, default=2000)
    p.add_argument("--vocab-size", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    docs = documents(args.docs, args.seed)
    ds = write_dataset(args.out, docs)
    tk = write_tokenizer(args.out, docs, args.vocab_size)
    print(f"dataset: {ds}\ntokenizer: {tk}")


if __name__ == "__main__":
    main()
