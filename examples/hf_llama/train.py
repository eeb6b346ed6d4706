"""Train a small Hugging Face Llama with dropout, compiled by nkipy and eagerly, and compare losses.

    python examples/hf_llama/train.py                  # kernels draw dropout masks (Philox)
    python examples/hf_llama/train.py --fallback-random

Both runs start from the same weights, train with AdamW on one fixed random token batch (the
language-modelling loss of ``LlamaForCausalLM``) and reseed torch's generator identically. The
compiled model draws its attention-dropout masks inside its kernels by default: the numbers are
not torch's, so the loss curves agree only within a tolerance. With ``--fallback-random``
(``options={"fallback_random": True}``) the masks come from torch's CPU generator, drawn in
eager's order, and the curves agree to float rounding (``EXACT_TOLERANCE``). Prints both curves
and their largest difference; exit status 1 if they differ by more than the tolerance.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from collections.abc import Callable

import torch
from generate import kernels_looked_up, small_llama
from transformers import LlamaForCausalLM

from nkipy_core import cache_stats, init_nkipy_backend

#: largest loss difference with masks from torch's generator: kernels and eager round differently
EXACT_TOLERANCE = 2e-6
#: largest loss difference with masks drawn in the kernels (other dropout masks, same distribution)
DROPOUT_TOLERANCE = 0.05


def train(
    model: LlamaForCausalLM,
    forward: Callable,
    batch: torch.Tensor,
    steps: int,
    *,
    lr: float = 1e-3,
    seed: int = 0,
) -> list[float]:
    """The loss of each of ``steps`` AdamW steps of ``model`` (called through ``forward``) on ``batch``."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    torch.manual_seed(seed)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = forward(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def compare(model: LlamaForCausalLM, batch: torch.Tensor, steps: int, **options) -> dict:
    """Eager and nkipy loss curves from copies of ``model``, their largest difference, the
    kernels compiled and the ops left on CPU."""
    eager = copy.deepcopy(model)
    expected = train(eager, eager, batch, steps)
    compiled = copy.deepcopy(model)
    before = cache_stats.copy()
    losses = train(
        compiled,
        torch.compile(compiled, backend="nkipy", dynamic=False, options=options),
        batch,
        steps,
    )
    return {
        "losses": losses,
        "expected": expected,
        "max_difference": max(abs(a - b) for a, b in zip(losses, expected, strict=True)),
        "kernels": kernels_looked_up(cache_stats) - kernels_looked_up(before),
        "fallback_ops": cache_stats["fallback_ops"] - before["fallback_ops"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dropout", type=float, default=0.1, help="attention_dropout of the model")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument(
        "--fallback-random",
        action="store_true",
        help="draw dropout masks from torch's CPU generator, as eager does",
    )
    parser.add_argument(
        "--runtime",
        default=None,
        help="nkipy runtime (default: NKIPY_RUNTIME or the best available)",
    )
    args = parser.parse_args(argv)

    init_nkipy_backend(runtime=args.runtime, nkipy_cache=tempfile.mkdtemp(prefix="nkipy-llama-"))
    model = small_llama(attention_dropout=args.dropout)
    generator = torch.Generator().manual_seed(1)
    batch = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), generator=generator)
    result = compare(model, batch, args.steps, fallback_random=args.fallback_random)
    tolerance = EXACT_TOLERANCE if args.fallback_random else DROPOUT_TOLERANCE
    print(f"eager losses: {[round(v, 5) for v in result['expected']]}")
    print(f"nkipy losses: {[round(v, 5) for v in result['losses']]}")
    print(
        f"max difference {result['max_difference']:.2e} (tolerance {tolerance:.0e}, "
        f"dropout masks from {'torch' if args.fallback_random else 'the kernels'}); "
        f"kernels: {result['kernels']}, ops on CPU: {result['fallback_ops']}"
    )
    return 0 if result["max_difference"] <= tolerance else 1


if __name__ == "__main__":
    raise SystemExit(main())
