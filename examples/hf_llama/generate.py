"""Greedy generation with a Hugging Face ``LlamaForCausalLM`` compiled by nkipy, against eager.

    python examples/hf_llama/generate.py                       # a small random Llama (seeded)
    python examples/hf_llama/generate.py --checkpoint PATH     # a local HF checkpoint directory

The model's ``forward`` is compiled with ``torch.compile(backend="nkipy")`` and driven by an
explicit loop over a transformers ``StaticCache``: one prefill call over the prompt, then one
call per new token. The static cache keeps every decode step's shapes fixed (the cache is
preallocated and written in place at ``cache_position``), so the first decode step compiles a
kernel set and every later step reuses it: the script checks that later steps compile no graph
and look up no kernel, and that the tokens equal eager's greedy tokens (exit status 1 if not).
It prints the tokens, the kernels, the ops left on CPU and tokens/s for eager and nkipy.
``--device nkipy`` keeps the compiled model's weights, cache and tokens on the ``nkipy`` device.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from collections.abc import Callable

import torch
from torch._dynamo.utils import counters
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

from nkipy_core import cache_stats, init_nkipy_backend, register_device


def small_llama(
    *,
    seed: int = 0,
    vocab: int = 256,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    max_positions: int = 128,
    **config,
) -> LlamaForCausalLM:
    """A randomly initialised Llama (grouped-query attention, untied embeddings) from ``seed``;
    torch's global generator is left as it was."""
    llama = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=intermediate,
        max_position_embeddings=max_positions,
        **config,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return LlamaForCausalLM(llama)


def load_model(checkpoint: str | None, *, seed: int = 0) -> LlamaForCausalLM:
    """The checkpoint in the local directory ``checkpoint`` (never downloaded), in float32 so that
    greedy tokens compare exactly with eager's (half-float logits can tie differently), or
    ``small_llama``."""
    if checkpoint is None:
        return small_llama(seed=seed).eval()
    return LlamaForCausalLM.from_pretrained(
        checkpoint, local_files_only=True, dtype=torch.float32
    ).eval()


def kernels_looked_up(stats) -> int:
    """Kernels fetched from the cache so far, compiled or found there: one per kernel of each
    graph compiled (a warm cache lowers none, so ``lowered_kernels`` would count none)."""
    return stats["hits"] + stats["misses"]


class Watched:
    """``forward``, recording per call what compiling cost inside it: graphs dynamo compiled
    and kernels looked up in the cache. Eager ops on the ``nkipy`` device between
    calls (the loop's ``argmax``) are queued and run as kernels of their own before the call,
    which this leaves out."""

    def __init__(self, forward: Callable):
        self.forward = forward
        self.calls: list[tuple[int, int]] = []

    @staticmethod
    def _work() -> tuple[int, int]:
        return counters["stats"]["unique_graphs"], kernels_looked_up(cache_stats)

    def __call__(self, *args, **kwargs):
        if any(getattr(v, "device", None) == torch.device("nkipy", 0) for v in kwargs.values()):
            torch.nkipy.synchronize()  # the eager ops queued since the last call run first
        before = self._work()
        out = self.forward(*args, **kwargs)
        self.calls.append(tuple(a - b for a, b in zip(self._work(), before)))
        return out

    @property
    def kernels(self) -> int:
        return sum(lookups for _, lookups in self.calls)

    @property
    def after_first_decode(self) -> tuple[int, int]:
        """Graphs compiled and kernels looked up by the calls after the first decode step
        (prefill is call 0): both zero when every later step reuses the first one's kernels."""
        return sum(c[0] for c in self.calls[2:]), sum(c[1] for c in self.calls[2:])


def greedy(
    forward: Callable, model: LlamaForCausalLM, prompt: torch.Tensor, new_tokens: int
) -> torch.Tensor:
    """``new_tokens`` greedy tokens after ``prompt`` (batch, length), through ``forward`` and a
    ``StaticCache`` sized for prompt and answer: one prefill call, then one call per token."""
    length = prompt.shape[1]
    cache = StaticCache(config=model.config, max_cache_len=length + new_tokens)
    tokens, position = prompt, torch.arange(length, device=prompt.device)
    out = []
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = forward(
                input_ids=tokens, past_key_values=cache, cache_position=position, use_cache=True
            ).logits
            tokens = logits[:, -1].argmax(-1, keepdim=True)
            out.append(tokens)
            position = position[-1:] + 1
    return torch.cat(out, dim=1)


def tokens_per_second(run: Callable[[], torch.Tensor], repeat: int = 3) -> float:
    """Best of ``repeat`` runs: generated tokens over the wall time of the whole loop."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        tokens = run()
        best = min(best, time.perf_counter() - start)
    return tokens.numel() / best


def compare(
    model: LlamaForCausalLM,
    prompt: torch.Tensor,
    new_tokens: int,
    *,
    device: str = "cpu",
    **options,
) -> dict:
    """Eager (on CPU) and nkipy greedy tokens for ``prompt``, and what compiling cost: kernels, ops
    on CPU, graphs and kernel look-ups after the first decode step, tokens/s of both. With
    ``device="nkipy"`` the compiled model's weights, cache and tokens live on the ``nkipy`` device."""
    expected = greedy(model.forward, model, prompt, new_tokens)
    compiled = model if device == "cpu" else copy.deepcopy(model).to(device)
    on_device = prompt.to(device)
    forward = Watched(
        torch.compile(compiled.forward, backend="nkipy", dynamic=False, options=options)
    )
    fallbacks = cache_stats["fallback_ops"]
    tokens = greedy(forward, compiled, on_device, new_tokens).cpu()
    return {
        "tokens": tokens,
        "expected": expected,
        "match": torch.equal(tokens, expected),
        "kernels": forward.kernels,
        "fallback_ops": cache_stats["fallback_ops"] - fallbacks,
        "after_first_decode": forward.after_first_decode,
        "eager_tokens_per_s": tokens_per_second(
            lambda: greedy(model.forward, model, prompt, new_tokens)
        ),
        "nkipy_tokens_per_s": tokens_per_second(
            lambda: greedy(forward.forward, compiled, on_device, new_tokens)
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--checkpoint", help="a local Hugging Face Llama checkpoint directory (no download)"
    )
    parser.add_argument("--prompt-length", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--runtime",
        default=None,
        help="nkipy runtime (default: NKIPY_RUNTIME or the best available)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "nkipy"),
        default="cpu",
        help="where the compiled model's weights and cache live (eager runs on CPU)",
    )
    args = parser.parse_args(argv)

    init_nkipy_backend(runtime=args.runtime, nkipy_cache=tempfile.mkdtemp(prefix="nkipy-llama-"))
    if args.device == "nkipy":
        register_device()  # without Trainium or a named runtime, asked for here
    model = load_model(args.checkpoint, seed=args.seed)
    prompt = torch.randint(
        0,
        model.config.vocab_size,
        (1, args.prompt_length),
        generator=torch.Generator().manual_seed(args.seed),
    )
    result = compare(model, prompt, args.new_tokens, device=args.device)
    print(f"prompt:        {prompt[0].tolist()}")
    print(f"eager tokens:  {result['expected'][0].tolist()}")
    print(f"nkipy tokens:  {result['tokens'][0].tolist()}")
    print(f"matches eager: {result['match']}")
    graphs, lookups = result["after_first_decode"]
    print(
        f"kernels: {result['kernels']}, ops on CPU: {result['fallback_ops']}, "
        f"after the first decode step: {graphs} graphs compiled, {lookups} kernels looked up"
    )
    print(
        f"tokens/s: eager {result['eager_tokens_per_s']:.1f}, nkipy {result['nkipy_tokens_per_s']:.1f}"
    )
    return 0 if result["match"] and result["after_first_decode"] == (0, 0) else 1


if __name__ == "__main__":
    raise SystemExit(main())
