"""Where the time of the Llama-style block's `cpu` kernel goes: per primitive, and the kernel against
the whole compiled call and eager.

The block is compiled on the `cpu` runtime into a fresh cache; its ``kernel.py`` is then timed line
by line (the kernel function re-executed with a ``perf_counter`` around each statement, the median
per line over ``--calls`` calls), summed by primitive (read from ``kernel.ir``). The second table
times eager, the whole compiled call and the kernel alone (on the example inputs ``kernel.py`` makes)
interleaved round by round, so that a burst of load on a shared machine hits all three; the
minimum over rounds is the least disturbed figure, and is what the ratios use.

Run: python benchmarks/bench_kernel_ops.py [--dtypes float32 bfloat16] [--sizes small large] [--calls 300]
(``NKIPY_NKI_OVERRIDES=0`` measures the base rules' softmax and RMSNorm instead of the NKI overrides.)
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import textwrap
import time
from pathlib import Path

# first: it sets the thread count before torch starts its pools
from _timing import machine, print_table

# isort: split
import numpy as np
import torch
from bench_forward import SIZES

from nkipy_core.testing.models import LlamaBlock

_ASSIGN = re.compile(r"^    (v\d+) = ")
_IR_OP = re.compile(r"^\s*%(v\d+): \S+ = (\w+)\(")


def compiled_kernel(model, x) -> tuple[torch.nn.Module, Path]:
    """The block compiled on the cpu runtime, and the cache entry of its (only) kernel."""
    cache = Path(tempfile.mkdtemp(prefix="nkipy-bench-kernel-ops-"))
    compiled = torch.compile(
        model, backend="nkipy", options={"nkipy_cache": str(cache), "runtime": "cpu"}
    )
    compiled(x)
    (entry,) = {p.parent for p in cache.glob("kernels/*/kernel.py")}
    return compiled, entry


def load(source: str, namespace: dict) -> dict:
    exec(compile(source, "<kernel.py>", "exec"), namespace)  # noqa: S102 - the kernel we just generated
    return namespace


def example_inputs(source: str) -> list[np.ndarray]:
    """The inputs ``kernel.py``'s ``__main__`` block makes (the right shapes and dtypes)."""
    main = source.split('if __name__ == "__main__":\n')[1].split("    for out in")[0]
    return load("import numpy as np\nfrom ml_dtypes import bfloat16\n" + textwrap.dedent(main), {})[
        "inputs"
    ]


def per_line_times(source: str, inputs: list[np.ndarray], calls: int) -> dict[str, list[float]]:
    """Median seconds of each assignment in ``kernel``, keyed by the value it assigns."""
    head, body = source.split("\ndef kernel(", 1)
    lines, names = [], []
    for line in body.split("\n\n\n")[0].split("\n"):
        match = _ASSIGN.match(line)
        if match:
            names.append(match.group(1))
            lines += [
                "    _t = _clock()",
                line,
                f"    _times[{len(names) - 1}].append(_clock() - _t)",
            ]
        else:
            lines.append(line)
    times: list[list[float]] = [[] for _ in names]
    instrumented = head + "\ndef kernel(" + "\n".join(lines) + "\n"
    fn = load(instrumented, {"_clock": time.perf_counter, "_times": times})["kernel"]
    for _ in range(calls):
        fn(*inputs)
    return {name: statistics.median(t) for name, t in zip(names, times)}


def measure(dtype: torch.dtype, size: str, calls: int, rounds: int) -> None:
    model = LlamaBlock(SIZES[size]).to(dtype).eval()
    x = model.example_input(dtype)
    with torch.no_grad(), np.errstate(all="ignore"):
        compiled, entry = compiled_kernel(model, x)
        source = (entry / "kernel.py").read_text()
        prims = dict(
            m.groups()
            for m in map(_IR_OP.match, (entry / "kernel.ir").read_text().splitlines())
            if m
        )
        inputs = example_inputs(source)
        kernel = load(source, {"__name__": "bench"})["kernel"]
        lines = per_line_times(source, inputs, calls)
        by_prim: dict[str, list[float]] = {}
        for name, seconds in lines.items():
            by_prim.setdefault(prims[name], []).append(seconds)
        shared = source.count("\n# values that depend on no input") and len(
            re.findall(r"^v\d+ = ", source, re.M)
        )
        label = f"LlamaBlock {size} {str(dtype).removeprefix('torch.')}"
        print(
            f"\n{label}: kernel.py runs {len(lines)} ops per call ({shared} values computed at load time); "
            f"median per op over {calls} calls, by primitive"
        )
        print(f"{'primitive':<16} {'ops':>5} {'µs/call':>10} {'share':>7}")
        total = sum(lines.values())
        for prim, seconds in sorted(by_prim.items(), key=lambda kv: -sum(kv[1])):
            print(
                f"{prim:<16} {len(seconds):>5} {1e6 * sum(seconds):>10.1f} {sum(seconds) / total:>7.0%}"
            )
        print(f"{'total':<16} {len(lines):>5} {1e6 * total:>10.1f}")

        candidates = {
            "eager": lambda: model(x),
            "nkipy (cpu)": lambda: compiled(x),
            "nkipy: kernel.py alone": lambda: kernel(*inputs),
        }
        number = max(1, int(0.01 / max(_once(candidates["eager"]), 1e-6)))
        samples: dict[str, list[float]] = {name: [] for name in candidates}
        for _ in range(rounds):
            for name, fn in candidates.items():
                start = time.perf_counter()
                for _ in range(number):
                    fn()
                samples[name].append((time.perf_counter() - start) / number)
    print_table(
        f"{label}: minimum over {rounds} interleaved rounds of {number} calls",
        [(name, min(s)) for name, s in samples.items()],
        baselines=("eager",),
    )


def _once(fn) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dtypes", nargs="+", default=["float32", "bfloat16"], help="torch dtype names"
    )
    parser.add_argument(
        "--sizes", nargs="+", choices=sorted(SIZES), default=["small"], help="block sizes"
    )
    parser.add_argument("--calls", type=int, default=300, help="calls of the instrumented kernel")
    parser.add_argument(
        "--rounds", type=int, default=40, help="interleaved rounds of the second table"
    )
    args = parser.parse_args()
    print(f"machine: {machine()}")
    for size in args.sizes:
        for name in args.dtypes:
            measure(getattr(torch, name), size, args.calls, args.rounds)


if __name__ == "__main__":
    main()
