"""Per-call overhead of a compiled one-op function (``torch.add`` on small tensors).

With tensors this small the add itself costs almost nothing, so the time per call is the
price of getting into and out of the compiled code. Rows, all measured in this run, in rounds
(each round times every row once, so the machine's drift hits all rows alike):

  eager                 torch.add, no compilation
  dynamo only           torch.compile(backend="eager"): guards + the captured graph, no compiler
  inductor              torch.compile(backend="inductor")
  inductor, dynamic     torch.compile(backend="inductor", dynamic=True): one kernel for every
                        size, behind dynamo's symbolic-size guards (the row to set the next against)
  nkipy (cpu), dynamic  torch.compile(backend="nkipy", dynamic=True): symbolic sizes, so each
                        call first finds the static graph specialised for its sizes
  nkipy (cpu)           torch.compile(backend="nkipy") on the embedded cpu runtime

and the layers of the nkipy call, innermost last, each called directly (so the difference
between two rows is what the outer layer adds):

  nkipy: graph entry    what dynamo's guarded code calls for the graph compile_graph returned
                        (``kernel_call.entry``: a one-kernel graph is its kernel's call), here
                        without dynamo's guards; an inference graph like this one, which needs
                        nothing of AOTAutograd's runtime wrapper, is called without it
                        (``nkipy_core.dynamo.direct_call``), so this row is nkipy's whole share
  nkipy: KernelCall     the kernel's call: torch -> NumPy, run_host, NumPy -> torch
  nkipy: run_host       the cpu runtime's host call: the executable, results made memory of their own
  nkipy: executable     the cpu runtime's executable on NumPy arrays (errors of floating point ignored)
  nkipy: kernel.py      the generated kernel function from the cache, on NumPy arrays
  nkipy: kernel counters  the per-kernel counters' start and stop (profiling.KernelRecord), the
                        part of the KernelCall row that nkipy_core.kernel_stats() costs

Run: python benchmarks/bench_overhead.py [--size 8] [--repeat 15] [--number 2000]
"""

from __future__ import annotations

import argparse
import tempfile
import traceback
import types
from pathlib import Path

# first: it sets the thread count before torch starts its pools
from _timing import machine, median_times, print_table

# isort: split
import torch

import nkipy_core.dynamo.backend
from nkipy_core.compiler.kernel_call import KernelCall, entry
from nkipy_core.ir import codegen


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.add(a, b)


def capture_compiled_graphs() -> list:
    """Record the graph modules nkipy's compile_graph returns (to time the inner layers)."""
    graphs = []
    compile_graph = nkipy_core.dynamo.backend.compile_graph

    def recording(*args, **kwargs):
        graphs.append(compile_graph(*args, **kwargs))
        return graphs[-1]

    nkipy_core.dynamo.backend.compile_graph = recording
    return graphs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--size", type=int, default=8, help="tensors are size x size fp32 (default 8)"
    )
    parser.add_argument("--repeat", type=int, default=15, help="timed runs; the median is reported")
    parser.add_argument("--number", type=int, default=2000, help="calls per timed run")
    args = parser.parse_args()

    a, b = torch.randn(args.size, args.size), torch.randn(args.size, args.size)
    x, y = a.numpy(), b.numpy()
    expected = a + b
    cache = Path(tempfile.mkdtemp(prefix="nkipy-bench-overhead-"))
    graphs = capture_compiled_graphs()
    candidates = {
        "eager": lambda f: f,
        "dynamo only": lambda f: torch.compile(f, backend="eager"),
        "inductor": lambda f: torch.compile(f, backend="inductor"),
        "inductor, dynamic": lambda f: torch.compile(f, backend="inductor", dynamic=True),
        # before the static row: the layer rows below time the graph compiled last
        "nkipy (cpu), dynamic": lambda f: torch.compile(
            f, backend="nkipy", dynamic=True, options={"nkipy_cache": str(cache)}
        ),
        "nkipy (cpu)": lambda f: torch.compile(
            f, backend="nkipy", options={"nkipy_cache": str(cache)}
        ),
    }
    fns, notes = {}, {}

    def add_row(name, make, check):
        """Make row ``name``'s function and check it, or note why it could not be made."""
        try:
            fn = make()
            check(fn)
            fns[name] = fn
        except Exception as exc:  # noqa: BLE001 - report and go on with the other rows
            traceback.print_exc()
            notes[name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"

    for i, (name, make) in enumerate(candidates.items()):
        # each row compiles its own copy of ``add`` (a code object of its own): dynamo keeps
        # compiled code per code object, and rows sharing one would check each other's guards
        copy = types.FunctionType(
            add.__code__.replace(co_name=f"add_{i}"), add.__globals__, f"add_{i}"
        )
        compiled = make(copy)
        add_row(
            name,
            lambda compiled=compiled: lambda: compiled(a, b),
            lambda fn: torch.testing.assert_close(fn(), expected),
        )  # compiles, and checks the result

    if graphs:
        module = graphs[-1]
        call = next(m for m in module.children() if isinstance(m, KernelCall))
        (source,) = cache.glob("kernels/*/kernel.py")
        kernel = codegen.load(source.read_text())
        run = entry(module)
        layers = {
            "nkipy: graph entry": (
                lambda: run(a, b),
                lambda: torch.testing.assert_close(run(a, b)[0], expected),
            ),
            "nkipy: KernelCall": (
                lambda: call(a, b),
                lambda: torch.testing.assert_close(call(a, b), expected),
            ),
            "nkipy: run_host": (
                lambda: call.runtime.run_host(call.executable, [x, y]),
                lambda: None,
            ),
            "nkipy: executable": (lambda: call.executable(x, y), lambda: None),
            "nkipy: kernel.py": (lambda: kernel(x, y), lambda: None),
            # what KernelCall adds to each call for nkipy_core.kernel_stats() (plus this lambda)
            "nkipy: kernel counters": (lambda: call.stats.stop(call.stats.start()), lambda: None),
        }
        for name, (fn, check) in layers.items():
            add_row(name, lambda fn=fn: fn, lambda fn, check=check: check())

    times = median_times(fns, repeat=args.repeat, number=args.number)
    rows = [
        (name, times.get(name)) for name in (*candidates, *(n for n in fns if n not in candidates))
    ]

    print(f"machine: {machine()}")
    print_table(
        f"torch.add({args.size}x{args.size} fp32): median of {args.repeat} runs x {args.number} calls",
        rows,
        unit="µs/call",
        note=notes,
    )


if __name__ == "__main__":
    main()
