"""Forward latency of the Llama-style block: nkipy on each runtime vs eager vs inductor.

Inference (``torch.no_grad()``), fp32 and bf16, all measured in this run after compiling and
checking each compiled output against eager, then timed in rounds (one run of every row per
round, so that all see the same drift of the machine's speed). One nkipy row per available
runtime (``--runtimes``), with CPU tensors in and out, and one with the weights and input on the
``nkipy`` device (``--device-runtime``, default ``xla`` when installed): ``cpu`` runs the
generated NumPy kernels (the reference executor, not a performance target); ``xla``
(nkipy-runtime[xla]) runs the StableHLO that would go to neuronx-cc, compiled by XLA for this
CPU. For each runtime the time its ``compile`` took per kernel is printed too (the cost of the
backend compiler, which a warm kernel cache skips). The ops that no installed pack lowers run as
torch between the kernels; they are listed, because the figures depend on how much of the block
is lowered.

Run: python benchmarks/bench_forward.py [--dtypes float32 bfloat16] [--repeat 15] [--sdpa] [--runtimes cpu xla]
     [--device-runtime xla] [--sizes small large]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import tempfile
import time
import traceback
import warnings

# first: it sets the thread count before torch starts its pools
from _timing import (
    host_runtimes,
    machine,
    median_times,
    print_table,
    rows_compiled_alike,
    warmup_of,
)

# isort: split
import torch

import nkipy_core
from nkipy_core.plugin import manager as plugins
from nkipy_core.testing.models import LlamaBlock, LlamaConfig


@contextlib.contextmanager
def compile_timer(runtime, seconds: list[float]):
    """Record how long each ``runtime.compile`` call takes (one per kernel compiled)."""
    original = runtime.compile

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    runtime.compile = timed
    try:
        yield
    finally:
        del runtime.compile


def nkipy_candidate(model, runtime: str, compile_seconds: list[float]):
    cache = tempfile.mkdtemp(prefix=f"nkipy-bench-forward-{runtime}-")
    compiled = torch.compile(
        model, backend="nkipy", options={"nkipy_cache": cache, "runtime": runtime}
    )

    def first_call_timed(x):
        with compile_timer(plugins.get().runtimes.get(runtime), compile_seconds):
            return compiled(x)

    return compiled, first_call_timed


def on_device_candidate(model, x):
    """The block's weights and input on the ``nkipy`` device (as on Trainium: nothing is staged
    per call); the output stays there, computed (the runtimes run kernels synchronously)."""
    resident = copy.deepcopy(model).to("nkipy")
    x_resident = x.to("nkipy")
    compiled = torch.compile(resident, backend="nkipy", options={"nkipy_cache": tempfile.mkdtemp()})
    return (lambda _: compiled(x_resident)), (lambda _: compiled(x_resident).cpu())


#: ``--size``: the tests' block, and one with enough work per call that kernels, not per-call
#: overheads, dominate
SIZES = {
    "small": LlamaConfig(),
    "large": LlamaConfig(hidden=256, heads=8, seq=128, intermediate=512, batch=2),
}


def measure(
    dtype: torch.dtype, repeat: int, sdpa: bool, runtimes: list[str], device_runtime: str, size: str
) -> None:
    model = LlamaBlock(SIZES[size], sdpa=sdpa).to(dtype).eval()
    x = model.example_input(dtype)
    compile_seconds: dict[str, list[float]] = {name: [] for name in runtimes}
    candidates = {
        "eager": lambda: (model, model),
        "inductor": lambda: (torch.compile(model, backend="inductor"),) * 2,
        **{
            f"nkipy ({name})": (
                lambda name=name: nkipy_candidate(model, name, compile_seconds[name])
            )
            for name in runtimes
        },
        f"nkipy ({device_runtime}, on device)": lambda: on_device_candidate(model, x),
    }
    tolerance = (
        {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 5e-2}
    )
    runs, notes, fallbacks = {}, {}, []
    with torch.no_grad(), rows_compiled_alike(len(candidates)):
        expected = model(x)
        for name, make in candidates.items():
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    fn, first = make()
                    out = first(x)  # compiles
                fallbacks += [
                    str(w.message)
                    for w in caught
                    if issubclass(w.category, nkipy_core.FallbackWarning)
                ]
                torch.testing.assert_close(out, expected, **tolerance)
                notes[name] = (
                    f"max|out - eager| {(out.float() - expected.float()).abs().max().item():.1e}"
                )
                for _ in range(warmup_of(name, 5)):
                    fn(x)
                runs[name] = lambda fn=fn: fn(x)
            except Exception as exc:  # noqa: BLE001 - report and go on with the other rows
                traceback.print_exc()
                notes[name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        times = median_times(runs, warmup=1, repeat=repeat)
    torch._dynamo.reset()
    rows = [(name, times.get(name)) for name in candidates]

    c = model.config
    print_table(
        f"LlamaBlock{' (sdpa)' if sdpa else ''} {str(dtype).removeprefix('torch.')}, "
        f"batch {c.batch} x seq {c.seq} x hidden {c.hidden}: median of {repeat} runs",
        rows,
        unit="ms/call",
        note=notes,
    )
    ops = sorted({m.removeprefix("nkipy: ").split(" runs on CPU")[0] for m in fallbacks})
    print(
        f"  nkipy: {len(ops)} ATen op(s) ran as torch on CPU between kernels: {', '.join(ops) or '-'}"
    )
    for name, seconds in compile_seconds.items():
        if seconds:
            print(
                f"  nkipy ({name}): compile per kernel {1e3 * sum(seconds) / len(seconds):.1f} ms mean, "
                f"{1e3 * max(seconds):.1f} ms max, {len(seconds)} kernel(s)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dtypes", nargs="+", default=["float32", "bfloat16"], help="torch dtype names"
    )
    parser.add_argument("--repeat", type=int, default=15, help="timed runs; the median is reported")
    parser.add_argument(
        "--sdpa", action="store_true", help="attention via F.scaled_dot_product_attention"
    )
    parser.add_argument(
        "--runtimes",
        nargs="+",
        default=None,
        help="nkipy runtimes to measure (default: all available)",
    )
    parser.add_argument(
        "--device-runtime",
        default=None,
        help="runtime of the 'on device' row, one per process (default: xla if available, else cpu)",
    )
    parser.add_argument(
        "--sizes", nargs="+", choices=sorted(SIZES), default=["small"], help="block sizes"
    )
    args = parser.parse_args()
    runtimes = args.runtimes or host_runtimes()
    device_runtime = args.device_runtime or ("xla" if "xla" in host_runtimes() else "cpu")
    nkipy_core.init_nkipy_backend(
        runtime=device_runtime
    )  # the device's memory lives in this runtime
    print(f"machine: {machine()}")
    for size in args.sizes:
        for name in args.dtypes:
            measure(getattr(torch, name), args.repeat, args.sdpa, runtimes, device_runtime, size)


if __name__ == "__main__":
    main()
