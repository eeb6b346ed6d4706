"""Per-op eager overhead on the ``nkipy`` device, against CPU eager, in the same run.

Each op runs on 8x8 fp32 tensors (``--size``), so the arithmetic costs almost nothing and the
time per call is the price of dispatching one op. Ops: ``torch.add(a, b)``, ``torch.relu(a)``,
``a @ b``, ``a.sum(-1)`` and the in-place ``a.add_(b)`` (on its own tensors, so the growing
values of the other ops' inputs are not touched; they grow linearly, which fp32 holds easily).
Rows, per op, all measured in this run, in rounds (``_timing.median_times``: the machine's
drift hits every row alike):

  cpu eager     the op on CPU tensors, no compilation
  inductor      torch.compile(fn, backend="inductor") on CPU tensors: what a compiled one-op call
                costs (n/a, with the error, if inductor cannot compile on this machine)
  nkipy eager   the op on nkipy tensors: dispatch through PrivateUse1 to nkipy's eager path,
                which runs a single-op kernel (lowered by the op packs, compiled by the embedded
                ``cpu`` runtime) from its in-memory cache. The first call, which compiles the
                kernel, is made (timed once, and checked against CPU) before the timed loop.

The cpu runtime runs kernels synchronously, so timing the calls times the work.

Then, per op, a summary line: nkipy eager ÷ cpu eager; the op's first nkipy call (cold for that
kernel: lowered + compiled into an empty on-disk cache; except ``a.add_(b)``, which runs the
functional add's kernel with its result written into ``a`` on the device, so it reuses the
kernel of the ``torch.add`` row); and the change in ``torch.nkipy.transfer_stats()`` across the timed nkipy
loop, 0 when inputs and outputs stay on the device (a CPU fallback would show up there, and as a
FallbackWarning, which is reported too).
Last, the first call of ``torch.add`` on a shape not used before (``size x 3*size``), timed once
with time.perf_counter after everything else is warm: the cost of lowering and compiling a new
single-op kernel, without the process's one-time costs (imports, plugin loading) that the very
first nkipy op of the process also pays (printed as well).

The kernel cache goes to a temporary directory that is removed at exit.

Run: python benchmarks/bench_eager.py [--size 8] [--repeat 9] [--number N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import traceback
import warnings

# first: it sets the thread count before torch starts its pools
from _timing import machine, median_times, print_table

# isort: split
import torch

import nkipy_core
from nkipy_core.compiler.fallback import FallbackWarning


def add(a, b):
    return torch.add(a, b)


def relu(a, b):
    return torch.relu(a)


def matmul(a, b):
    return a @ b


def sum_last(a, b):
    return a.sum(-1)


def add_inplace(a, b):
    return a.add_(b)


OPS = {  # table title -> the op as a function of (a, b)
    "torch.add": add,
    "torch.relu": relu,
    "a @ b": matmul,
    "a.sum(-1)": sum_last,
    "a.add_(b)": add_inplace,
}


def fmt_transfers(before: dict[str, int], after: dict[str, int]) -> str:
    """The counters that changed, e.g. ``device_to_host +2000``; ``0`` if none did."""
    changed = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    return ", ".join(f"{k} {d:+d}" for k, d in changed.items()) or "0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--size", type=int, default=8, help="tensors are size x size fp32 (default 8)"
    )
    parser.add_argument("--repeat", type=int, default=9, help="timed runs; the median is reported")
    parser.add_argument(
        "--number",
        type=int,
        default=None,
        help="calls per timed run (default: as many as take about 50 ms)",
    )
    args = parser.parse_args()

    cache = tempfile.TemporaryDirectory(prefix="nkipy-bench-eager-")
    # one kernel per op: what these rows measure (bench_eager_fusion.py measures fusion)
    nkipy_core.init_nkipy_backend(nkipy_cache=cache.name, runtime="cpu", eager_fusion=False)
    print(f"machine: {machine()}")
    print(f"nkipy: eager ops on the 'cpu' runtime, kernel cache in {cache.name} (removed at exit)")

    n = args.size
    torch.manual_seed(0)
    timing = dict(repeat=args.repeat, number=args.number)
    summaries: list[str] = []
    first_process_call: float | None = None

    for title, fn in OPS.items():
        a0, b_cpu = torch.randn(n, n), torch.randn(n, n)
        expected = fn(a0.clone(), b_cpu)  # every timed loop gets its own copy of a (a.add_(b))
        a_cpu = a0.clone()
        notes: dict[str, str] = {}
        timed = {"cpu eager": lambda: fn(a_cpu, b_cpu)}

        # inductor on CPU tensors
        torch._dynamo.reset()
        try:
            compiled = torch.compile(fn, backend="inductor")
            torch.testing.assert_close(compiled(a0.clone(), b_cpu), expected)
            a_ind = a0.clone()
            timed["inductor"] = lambda: compiled(a_ind, b_cpu)
        except Exception as exc:  # noqa: BLE001 - report and go on with the other rows
            traceback.print_exc()
            notes["inductor"] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"

        # nkipy eager: first call (compiles the kernel), check, then the warm loop
        a_dev, b_dev = a0.clone().to("nkipy"), b_cpu.to("nkipy")
        a_first = a0.clone().to("nkipy")  # the checked first call gets its own a too
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", FallbackWarning)
            start = time.perf_counter()
            result = fn(a_first, b_dev)
            first_call = time.perf_counter() - start
            if first_process_call is None:
                first_process_call = first_call
            assert result.device.type == "nkipy", f"{title}: result on {result.device}"
            torch.testing.assert_close(result.cpu(), expected)
            timed["nkipy eager"] = lambda: fn(a_dev, b_dev)
            before = torch.nkipy.transfer_stats()
            times = median_times(timed, **timing)
            after = torch.nkipy.transfer_stats()
        torch._dynamo.reset()
        rows = [(name, times.get(name)) for name in ("cpu eager", "inductor", "nkipy eager")]
        fallbacks = sorted(
            {str(w.message) for w in caught if issubclass(w.category, FallbackWarning)}
        )

        print_table(
            f"{title} {n}x{n} fp32: median of {args.repeat} runs",
            rows,
            unit="µs/call",
            baselines=("cpu eager", "inductor"),
            note=notes,
        )
        if title == "torch.add":
            print(f"transfer_stats before the timed nkipy loop: {before}")
            print(f"transfer_stats after the timed nkipy loop:  {after}")
        ratio = times["nkipy eager"] / times["cpu eager"]
        summary = (
            f"{title:<11} nkipy eager ÷ cpu eager = {ratio:6.1f}x   first nkipy call "
            f"{first_call * 1e3:8.2f} ms   transfers during the timed loop: {fmt_transfers(before, after)}"
        )
        if fallbacks:
            summary += "   FALLBACK: " + " | ".join(fallbacks)
        summaries.append(summary)

    # cold: a new shape for an op whose other kernels are warm
    a_new, b_new = torch.randn(n, 3 * n).to("nkipy"), torch.randn(n, 3 * n).to("nkipy")
    start = time.perf_counter()
    torch.add(a_new, b_new)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    torch.add(a_new, b_new)
    second = time.perf_counter() - start

    print("\nsummary")
    for line in summaries:
        print(line)
    print(
        f"\nfirst nkipy op of the process ({next(iter(OPS))}, includes one-time costs): "
        f"{first_process_call * 1e3:.1f} ms"
    )
    print(
        f"torch.add on a new shape {n}x{3 * n} (kernel lowered + compiled, measured once): "
        f"{cold * 1e3:.2f} ms; its second call {second * 1e6:.0f} µs"
    )
    cache.cleanup()


if __name__ == "__main__":
    main()
