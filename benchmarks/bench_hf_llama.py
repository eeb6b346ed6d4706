"""transformers' ``LlamaForCausalLM``: prefill, greedy generation and a training step, nkipy vs eager vs inductor.

Five tables from one run, each with a row for eager, inductor and nkipy on every available
runtime (``cpu``; ``xla`` when nkipy-runtime[xla] is installed), all on CPU tensors:

- forward: one call over the prompt (``use_cache=False``), the prefill's work;
- generate: the greedy loop of examples/hf_llama/generate.py (prefill, then one call per token
  over a ``StaticCache``), reported as time per generated token so that ratios read like the
  other tables (tokens/s in the notes);
- training step: forward with the language-modelling loss, backward and ``AdamW.step``
  (dropout off, so every row computes the same numbers); then the same step with
  ``optimizer.step`` compiled by the row's backend too (``torch.compile(optimizer.step)``);
- optimizer: that compiled ``AdamW.step`` alone, over the model's parameters and gradients.

Before timing, each compiled row is checked against eager: logits within 1e-4, the same greedy
tokens, the first step's loss within 1e-4. The model is a random Llama of a medium size (the
example's ``small_llama`` with ``--hidden``/``--layers``/...).

Run: python benchmarks/bench_hf_llama.py [--hidden 256] [--layers 2] [--seq 64] [--new-tokens 16] [--repeat 5]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

# first: it sets the thread count before torch starts its pools
from _timing import backends, machine, measure

# isort: split
import torch

import nkipy_core

# the model and the greedy loop are the example's
sys.path.insert(0, str(Path(__file__).parents[1] / "examples" / "hf_llama"))
from generate import greedy, small_llama  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument(
        "--seq", type=int, default=64, help="prompt length (and training sequence length)"
    )
    parser.add_argument("--batch", type=int, default=2, help="training batch")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=9, help="timed runs; the median is reported")
    args = parser.parse_args()
    nkipy_core.init_nkipy_backend(runtime="cpu")
    model = small_llama(
        hidden=args.hidden,
        layers=args.layers,
        heads=args.heads,
        kv_heads=args.kv_heads,
        vocab=args.vocab,
        intermediate=4 * args.hidden,
        max_positions=args.seq + args.new_tokens,
    ).eval()
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, args.vocab, (1, args.seq), generator=generator)
    batch = torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator)
    compilers = backends()
    print(f"machine: {machine()}")
    size = (
        f"hidden {args.hidden}, {args.layers} layers, {args.heads} heads ({args.kv_heads} kv), "
        f"vocab {args.vocab}"
    )

    def close(got, expected):
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)

    def forward_row(compile_fn):
        fn = compile_fn(model.forward)

        def run():
            with torch.no_grad():
                return fn(input_ids=prompt, use_cache=False).logits

        return run, run

    measure(
        f"LlamaForCausalLM forward, {size}; prompt 1 x {args.seq}",
        "ms/call",
        compilers,
        forward_row,
        close,
        args.repeat,
    )

    def generate_row(compile_fn):
        fn = compile_fn(model.forward)
        run = lambda: greedy(fn, model, prompt, args.new_tokens)  # noqa: E731
        return run, run

    def same_tokens(got, expected):
        assert torch.equal(got, expected), f"tokens {got.tolist()} != eager's {expected.tolist()}"

    measure(
        f"LlamaForCausalLM greedy generation, {size}; prompt {args.seq}, {args.new_tokens} new tokens "
        f"(StaticCache), time per token incl. prefill",
        "ms/call",
        compilers,
        generate_row,
        same_tokens,
        args.repeat,
        per=args.new_tokens,
        note=lambda seconds: f"{1 / seconds:.1f} tokens/s",
    )

    def training_row(compile_fn, compile_optimizer=False):
        trained = copy.deepcopy(model).train()
        fn = compile_fn(trained)
        optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-4)
        update = compile_fn(optimizer.step) if compile_optimizer else optimizer.step

        def step():
            optimizer.zero_grad()
            loss = fn(input_ids=batch, labels=batch).loss
            loss.backward()
            update()
            return loss.detach()

        return step, step

    for compile_optimizer, what in ((False, "AdamW"), (True, "AdamW compiled by the same backend")):
        measure(
            f"LlamaForCausalLM training step (forward, backward, {what}), {size}; "
            f"batch {args.batch} x {args.seq}",
            "ms/call",
            compilers,
            lambda compile_fn, compile_optimizer=compile_optimizer: training_row(
                compile_fn, compile_optimizer
            ),
            close,
            args.repeat,
            warmup=3,
        )

    def optimizer_row(compile_fn):
        trained = copy.deepcopy(model).train()
        trained(input_ids=batch, labels=batch).loss.backward()
        optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-4)
        update = compile_fn(optimizer.step)

        def first_update():
            update()
            return torch.cat([p.detach().reshape(-1) for p in trained.parameters()])

        return update, first_update

    measure(
        f"AdamW's step alone, compiled by the row's backend, {size}",
        "ms/call",
        compilers,
        optimizer_row,
        close,
        args.repeat,
        warmup=3,
    )


if __name__ == "__main__":
    main()
