"""Per-call overhead of a compiled one-op function (``torch.add`` on small tensors).

With tensors this small the add itself costs almost nothing, so the time per call is the
price of getting into and out of the compiled code: dynamo's guards, the AOTAutograd wrapper,
and for nkipy the FX module that calls the kernel plus the torch <-> runtime buffer conversions.
Rows, all measured in this run:

  eager             torch.add, no compilation
  dynamo only       torch.compile(backend="eager"): guards + the captured FX graph, no compiler
  inductor          torch.compile(backend="inductor")
  nkipy (cpu)       torch.compile(backend="nkipy") on the embedded cpu runtime
  nkipy kernel.py   the generated NumPy kernel from the cache, called on NumPy arrays directly

Run: python benchmarks/bench_overhead.py [--size 8] [--repeat 15] [--number 2000]
"""

from __future__ import annotations

import argparse
import tempfile
import traceback
from pathlib import Path

import torch

from _timing import machine, median_time, print_table


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.add(a, b)


def kernel_alone(cache: Path):
    """The one generated ``kernel.py`` of this run, loaded the way the cpu runtime loads it."""
    from nkipy_core.ir import codegen

    sources = sorted(cache.glob("kernels/*/kernel.py"))
    if len(sources) != 1:
        raise RuntimeError(f"expected one kernel in {cache}, found {len(sources)}")
    return codegen.load(sources[0].read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=8, help="tensors are size x size fp32 (default 8)")
    parser.add_argument("--repeat", type=int, default=15, help="timed runs; the median is reported")
    parser.add_argument("--number", type=int, default=2000, help="calls per timed run")
    args = parser.parse_args()

    a, b = torch.randn(args.size, args.size), torch.randn(args.size, args.size)
    expected = a + b
    cache = Path(tempfile.mkdtemp(prefix="nkipy-bench-overhead-"))
    candidates = {
        "eager": lambda: add,
        "dynamo only": lambda: torch.compile(add, backend="eager"),
        "inductor": lambda: torch.compile(add, backend="inductor"),
        "nkipy (cpu)": lambda: torch.compile(add, backend="nkipy", options={"nkipy_cache": str(cache)}),
    }
    rows, notes = [], {}
    for name, make in candidates.items():
        torch._dynamo.reset()
        try:
            fn = make()
            torch.testing.assert_close(fn(a, b), expected)  # compiles, and checks the result
            rows.append((name, median_time(lambda: fn(a, b), repeat=args.repeat, number=args.number)))
        except Exception as exc:  # noqa: BLE001 - report and go on with the other rows
            traceback.print_exc()
            rows.append((name, None))
            notes[name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        torch._dynamo.reset()

    try:
        kernel = kernel_alone(cache)
        x, y = a.numpy(), b.numpy()
        rows.append(("nkipy kernel.py (NumPy)", median_time(lambda: kernel(x, y), repeat=args.repeat, number=args.number)))
    except Exception as exc:  # noqa: BLE001
        rows.append(("nkipy kernel.py (NumPy)", None))
        notes["nkipy kernel.py (NumPy)"] = f"failed: {exc}"

    print(f"machine: {machine()}")
    print_table(
        f"torch.add({args.size}x{args.size} fp32): median of {args.repeat} runs x {args.number} calls",
        rows,
        unit="µs/call",
        note=notes,
    )


if __name__ == "__main__":
    main()
