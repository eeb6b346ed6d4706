"""The Llama-style block over ten sequence lengths: how much runs as kernels when sizes change.

``torch.compile(block, backend="nkipy")`` with dynamo's defaults is called with sequence lengths
8..17 (batch 2, hidden 64, fp32, inference). The first length compiles a static graph; from the
second on dynamo hands nkipy a graph with a symbolic sequence length, which nkipy specialises
into one static kernel graph per length. Printed: the ``FallbackWarning`` count, the counters of
``nkipy_core.cache_stats`` (``specializations``, ``fallback_ops``, kernels lowered), the largest
difference from eager, and the time of the first call (compile) and of a warm call per length,
with eager's warm call measured in the same run.

It runs against any nkipy-core (only the public API is used), so the same script measures the
code before and after a change: ``PYTHONPATH=<other checkout's src dirs> python benchmarks/bench_dynamic.py``.

Run: python benchmarks/bench_dynamic.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings

# first: it sets the thread count before torch starts its pools
from _timing import machine, median_time

# isort: split
import torch

import nkipy_core
from nkipy_core.testing.models import LlamaBlock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--repeat", type=int, default=7, help="timed runs per length; the median is reported"
    )
    args = parser.parse_args()

    block = LlamaBlock().eval()
    compiled = torch.compile(
        block,
        backend="nkipy",
        options={"nkipy_cache": tempfile.mkdtemp(prefix="nkipy-bench-dynamic-")},
    )
    lengths = range(8, 18)
    rows, worst = [], 0.0
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for seq in lengths:
            x = torch.randn(2, seq, 64, generator=torch.Generator().manual_seed(seq))
            start = time.perf_counter()
            out = compiled(x)
            first = time.perf_counter() - start
            worst = max(worst, (out - block(x)).abs().max().item())
            warm = median_time(lambda: compiled(x), repeat=args.repeat)
            eager = median_time(lambda: block(x), repeat=args.repeat)
            rows.append((seq, first, warm, eager))
    fallbacks = [w for w in caught if issubclass(w.category, nkipy_core.FallbackWarning)]
    stats = dict(nkipy_core.cache_stats)

    print(f"machine: {machine()}")
    print(
        f"\nLlamaBlock (batch 2, hidden 64, fp32), sequence lengths {lengths.start}..{lengths.stop - 1}"
    )
    print(
        f"{'seq':>5} {'first call (s)':>15} {'warm (ms/call)':>15} {'eager (ms/call)':>16} {'÷ eager':>9}"
    )
    for seq, first, warm, eager in rows:
        print(
            f"{seq:>5} {first:>15.3f} {warm * 1e3:>15.3f} {eager * 1e3:>16.3f} {warm / eager:>8.2f}x"
        )
    print(f"\nFallbackWarnings: {len(fallbacks)}")
    for key in (
        "specializations",
        "fallback_ops",
        "unspecialized_calls",
        "lowered_kernels",
        "compiled_kernels",
    ):
        print(f"cache_stats[{key!r}]: {stats.get(key, 0)}")
    print(f"max |compiled - eager|: {worst:.3g}")


if __name__ == "__main__":
    main()
