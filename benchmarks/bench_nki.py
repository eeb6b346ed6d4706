"""An RMSNorm + attention-softmax block, forward, with and without nkipy-ops-nki's NKI overrides.

Rows, all measured in this run:

  eager                   the block in eager torch
  inductor                torch.compile(backend="inductor")
  nkipy (cpu)             torch.compile(backend="nkipy"), NKIPY_NKI_OVERRIDES=0: nkipy-ops-base lowers
                          softmax and RMSNorm to NumPy code
  nkipy (cpu), NKI        the same with the overrides: softmax and RMSNorm are custom calls, run on
                          the NKI interpreter (what the device would run, checked tile by tile)

and the NKI interpreter alone on the softmax kernel against NumPy's softmax, per size.

Run: python benchmarks/bench_nki.py [--tokens 256] [--dim 256] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import tempfile

# first: it sets the thread count before torch starts its pools
from _timing import machine, median_time, print_table

# isort: split
import numpy as np
import torch

from nkipy_core import init_nkipy_backend
from nkipy_core.plugin import manager as plugins
from nkipy_ops_nki import interpreter
from nkipy_ops_nki.kernels import softmax


class Block(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(dim) + 0.5)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, h):
        h = self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6))
        scores = h @ h.transpose(-1, -2) / h.shape[-1] ** 0.5
        return torch.softmax(scores, dim=-1) @ self.proj(h)


def _nkipy(block: Block, overrides: bool):
    os.environ["NKIPY_NKI_OVERRIDES"] = "1" if overrides else "0"
    plugins.reload()
    torch._dynamo.reset()
    return torch.compile(block, backend="nkipy", fullgraph=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    init_nkipy_backend(runtime="cpu", nkipy_cache=tempfile.mkdtemp(prefix="nkipy-bench-nki-"))
    torch.manual_seed(0)
    block, x = Block(args.dim), torch.randn(2, args.tokens, args.dim)
    print(machine())
    rows = []
    with torch.no_grad():
        expected = block(x)
        variants = [("eager", block), ("inductor", torch.compile(block, backend="inductor"))]
        for name, fn in variants:
            rows.append((name, median_time(lambda fn=fn: fn(x), repeat=args.repeat)))
        for name, overrides in (("nkipy (cpu)", False), ("nkipy (cpu), NKI", True)):
            fn = _nkipy(block, overrides)
            torch.testing.assert_close(fn(x), expected, atol=1e-4, rtol=1e-4)
            rows.append((name, median_time(lambda fn=fn: fn(x), repeat=args.repeat, warmup=2)))
    print_table(f"block forward, x {list(x.shape)}", rows)

    interp = []
    for rows_, cols in ((128, 512), (1024, 1024), (4096, 128)):
        a = np.random.default_rng(0).random((rows_, cols), dtype=np.float32)

        def numpy_softmax(a=a):
            e = np.exp(a - a.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)

        base = median_time(numpy_softmax, repeat=args.repeat)
        kernel = median_time(
            lambda a=a: interpreter.run(softmax.softmax_kernel, [a]), repeat=args.repeat, warmup=1
        )
        interp.append((f"{rows_}x{cols}", base, kernel))
    print("\nsoftmax: NKI interpreter vs NumPy")
    print(f"{'':<12} {'numpy ms':>10} {'NKI ms':>10} {'ratio':>8}")
    for size, base, kernel in interp:
        print(f"{size:<12} {base * 1e3:>10.3f} {kernel * 1e3:>10.3f} {kernel / base:>7.1f}x")


if __name__ == "__main__":
    main()
