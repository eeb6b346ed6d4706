"""Forward latency of the Llama-style block: nkipy (cpu runtime) vs eager vs inductor.

Inference (``torch.no_grad()``), fp32 and bf16, all measured in this run after compiling and
checking each compiled output against eager. The ``cpu`` runtime runs the generated NumPy
kernels: it is the reference executor that makes the pipeline testable without Trainium, not a
performance target, so the nkipy row measures the cost of the pipeline's glue plus NumPy, not
of Trainium. The ops that no installed pack lowers run as torch between the kernels; they are
listed, because the figures depend on how much of the block is lowered.

Run: python benchmarks/bench_forward.py [--dtypes float32 bfloat16] [--repeat 15] [--sdpa]
"""

from __future__ import annotations

import argparse
import tempfile
import traceback
import warnings

from _timing import machine, median_time, print_table  # first: it sets the thread count

import torch

import nkipy_core
from nkipy_core.testing.models import LlamaBlock


def measure(dtype: torch.dtype, repeat: int, sdpa: bool) -> None:
    model = LlamaBlock(sdpa=sdpa).to(dtype).eval()
    x = model.example_input(dtype)
    cache = tempfile.mkdtemp(prefix="nkipy-bench-forward-")
    candidates = {
        "eager": lambda: model,
        "inductor": lambda: torch.compile(model, backend="inductor"),
        "nkipy (cpu)": lambda: torch.compile(model, backend="nkipy", options={"nkipy_cache": cache}),
    }
    tolerance = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 5e-2}
    rows, notes, fallbacks = [], {}, []
    with torch.no_grad():
        expected = model(x)
        for name, make in candidates.items():
            torch._dynamo.reset()
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    fn = make()
                    out = fn(x)  # compiles
                fallbacks += [str(w.message) for w in caught if issubclass(w.category, nkipy_core.FallbackWarning)]
                torch.testing.assert_close(out, expected, **tolerance)
                notes[name] = f"max|out - eager| {(out.float() - expected.float()).abs().max().item():.1e}"
                rows.append((name, median_time(lambda: fn(x), repeat=repeat)))
            except Exception as exc:  # noqa: BLE001 - report and go on with the other rows
                traceback.print_exc()
                rows.append((name, None))
                notes[name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        torch._dynamo.reset()

    c = model.config
    print_table(
        f"LlamaBlock{' (sdpa)' if sdpa else ''} {str(dtype).removeprefix('torch.')}, "
        f"batch {c.batch} x seq {c.seq} x hidden {c.hidden}: median of {repeat} runs",
        rows,
        unit="ms/call",
        note=notes,
    )
    ops = sorted({m.removeprefix("nkipy: ").split(" runs on CPU")[0] for m in fallbacks})
    print(f"  nkipy: {len(ops)} ATen op(s) ran as torch on CPU between kernels: {', '.join(ops) or '-'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], help="torch dtype names")
    parser.add_argument("--repeat", type=int, default=15, help="timed runs; the median is reported")
    parser.add_argument("--sdpa", action="store_true", help="attention via F.scaled_dot_product_attention")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    for name in args.dtypes:
        measure(getattr(torch, name), args.repeat, args.sdpa)


if __name__ == "__main__":
    main()
