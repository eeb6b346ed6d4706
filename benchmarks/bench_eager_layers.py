"""Where the time of one warm eager op on the ``nkipy`` device goes, layer by layer.

``torch.add(a, b)`` and ``a.add_(b)`` on 8x8 fp32 ``nkipy`` tensors (``--size``) on the embedded
``cpu`` runtime, against CPU eager and an inductor-compiled one-op call in the same run. Rows,
outermost first, each called directly (so the difference between two rows is what the outer
layer adds), all timed in rounds (``_timing.median_times``):

  cpu eager              torch.add on CPU tensors
  inductor               torch.compile(torch.add, backend="inductor") on CPU tensors
  nkipy torch.add        the op on nkipy tensors: the dispatcher's PrivateUse1 kernel, then
  nkipy eager.run        nkipy's eager path (device/eager.py: the fast dispatch cache), then
  nkipy KernelCall       the kernel's call on device tensors (``KernelCall.device_call``, what
                         a repeated all-device call reaches): their device arrays, the
                         runtime's run, the result wrapped in a new device tensor
  nkipy runtime.run      the cpu runtime on device arrays: NumPy views, run_host, the result
                         adopted as a new buffer
  nkipy run_host         the executable on NumPy arrays, results made memory of their own
  nkipy memory.array x2  the device arrays of the two inputs
  nkipy memory.wrap      a new device tensor around a result buffer (torch storage + tensor)
  nkipy a.add_(b)        the in-place op: the add kernel writes into ``a`` (reached as add.out)
  nkipy run_into         KernelCall.run_into: the kernel writing into ``a``'s buffer

Run: python benchmarks/bench_eager_layers.py [--size 8] [--repeat 9] [--number N]
"""

from __future__ import annotations

import argparse
import tempfile

# first: it sets the thread count before torch starts its pools
from _timing import machine, median_times, print_table

# isort: split
import torch

import nkipy_core
from nkipy_core.buffers import memory
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.device import eager


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--size", type=int, default=8, help="tensors are size x size fp32 (default 8)"
    )
    parser.add_argument("--repeat", type=int, default=9, help="timed runs; the median is reported")
    parser.add_argument(
        "--number", type=int, default=None, help="calls per timed run (default: ~50 ms)"
    )
    args = parser.parse_args()

    cache = tempfile.TemporaryDirectory(prefix="nkipy-bench-eager-layers-")
    # one kernel per op: what these rows measure (bench_eager_fusion.py measures fusion)
    nkipy_core.init_nkipy_backend(nkipy_cache=cache.name, runtime="cpu", eager_fusion=False)
    n = args.size
    a_cpu, b_cpu = torch.randn(n, n), torch.randn(n, n)
    a, b, target = a_cpu.to("nkipy"), b_cpu.to("nkipy"), a_cpu.to("nkipy")
    inductor = torch.compile(torch.add, backend="inductor")
    for _ in range(2):  # the first call compiles, the second takes the fast path
        torch.testing.assert_close(torch.add(a, b).cpu(), a_cpu + b_cpu)
        target.add_(b)
        torch.testing.assert_close(inductor(a_cpu, b_cpu), a_cpu + b_cpu)

    op = torch.ops.aten.add.Tensor
    call = next(
        v for k, v in eager._state().entries.items() if k[0] is op and isinstance(v, KernelCall)
    )
    runtime, executable = memory.runtime(), call.executable
    arrays = [memory.array(a), memory.array(b)]
    result = runtime.run(executable, arrays)[0]
    x, y = a_cpu.numpy(), b_cpu.numpy()
    timing = dict(repeat=args.repeat, number=args.number)
    kernel_call = getattr(call, "device_call", call)  # what a repeated all-device call reaches
    timed = {
        "cpu eager": lambda: torch.add(a_cpu, b_cpu),
        "inductor": lambda: inductor(a_cpu, b_cpu),
        "nkipy torch.add": lambda: torch.add(a, b),
        "nkipy eager.run": lambda: eager.run(op, (a, b), {}),
        "nkipy KernelCall": lambda: kernel_call(a, b),
        "nkipy runtime.run": lambda: runtime.run(executable, arrays),
        "nkipy run_host": lambda: runtime.run_host(executable, [x, y]),
        "nkipy memory.array x2": lambda: (memory.array(a), memory.array(b)),
        "nkipy memory.wrap": lambda: memory.wrap(result),
        "nkipy a.add_(b)": lambda: target.add_(b),
    }
    notes = {}
    if hasattr(call, "run_into"):  # a.add_(b) writes through it
        timed["nkipy run_into"] = lambda: call.run_into((target,), target, b)
    else:
        notes["nkipy run_into"] = "not in this version: a.add_(b) is the add, then a device copy"
    times = median_times(timed, **timing)
    rows = [(name, times.get(name)) for name in [*timed, *notes]]
    print(f"machine: {machine()}")
    print_table(
        f"eager torch.add / add_ on nkipy, {n}x{n} fp32: median of {args.repeat} runs",
        rows,
        unit="µs/call",
        baselines=("cpu eager", "inductor"),
        note=notes,
    )
    cache.cleanup()


if __name__ == "__main__":
    main()
