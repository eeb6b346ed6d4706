"""Repeated layers compiled once: a Llama of 2, 4, 8 and 16 decoder layers, a training step
(forward and backward), with ``dedup_layers`` on (one kernel per distinct layer, called once per
layer) and off (each AOTAutograd graph one kernel).

Per depth and mode, on the ``xla`` runtime (whose cache entries hold the HLO ``neuronx-cc`` would
be handed, ``hlo.txt``): kernels compiled, HLO instructions of the largest kernel and of all the
kernels together, compile seconds (the runtime's compile of every kernel, as each entry records
it) and kernel calls per step. Then the step time on the ``cpu`` and ``xla`` runtimes, against
eager and inductor measured in the same rounds.

Run: python benchmarks/bench_layers.py [--layers 2 4 8 16] [--runtimes cpu xla]
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
from pathlib import Path

# first: it sets the thread count before torch starts its pools
from _timing import machine, median_times, print_table

# isort: split
import torch

import nkipy_core
from nkipy_core.testing.models import LlamaConfig, LlamaModel

#: the decoder layers' size: large enough that a layer's work, not a kernel launch, is the step
CONFIG = LlamaConfig(hidden=256, heads=8, seq=64, intermediate=512, batch=2)


def step(model: torch.nn.Module, ids: torch.Tensor) -> None:
    model(ids).pow(2).mean().backward()


def kernel_calls(model: torch.nn.Module, ids: torch.Tensor) -> int:
    """Kernel calls one step makes, from the per-kernel counters."""
    nkipy_core.reset_kernel_stats()
    step(model, ids)
    return sum(s.calls for s in nkipy_core.kernel_stats())


def kernels_in(cache: Path) -> list[dict]:
    """Each kernel entry's compile seconds and HLO instructions (entries with HLO only)."""
    from nkipy_runtime.neuron import hlo_text

    found = []
    for entry in sorted((cache / "kernels").iterdir()):
        texts = list(entry.rglob("hlo.txt"))
        if texts:
            meta = json.loads((entry / "meta.json").read_text())
            instructions = sum(1 for _ in hlo_text.parse(texts[0].read_text()).instructions())
            found.append({"seconds": meta["compile_seconds"], "instructions": instructions})
    return found


def compiled(model: torch.nn.Module, runtime: str, dedup: bool, cache: Path):
    torch._dynamo.reset()
    options = {"runtime": runtime, "dedup_layers": dedup, "nkipy_cache": str(cache)}
    return torch.compile(model, backend="nkipy", options=options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--runtimes", nargs="+", default=["cpu", "xla"])
    args = parser.parse_args()
    print(f"machine: {machine()}")
    root = Path(tempfile.mkdtemp(prefix="nkipy-bench-layers-"))
    sizes = []
    for layers in args.layers:
        model = LlamaModel(layers, CONFIG)
        ids = model.example_input()
        eager = copy.deepcopy(model)
        fns = {"eager": lambda: step(eager, ids)}
        torch._dynamo.reset()
        inductor = torch.compile(copy.deepcopy(model), backend="inductor")
        fns["inductor"] = lambda f=inductor: step(f, ids)
        for runtime in args.runtimes:
            for dedup in (True, False):
                mode = "dedup" if dedup else "one kernel"
                cache = root / f"{layers}-{runtime}-{dedup}"
                fn = compiled(copy.deepcopy(model), runtime, dedup, cache)
                calls = kernel_calls(fn, ids)  # the first step compiles
                if runtime == "xla":
                    kernels = kernels_in(cache)
                    sizes.append(
                        (
                            layers,
                            mode,
                            len(kernels),
                            max(k["instructions"] for k in kernels),
                            sum(k["instructions"] for k in kernels),
                            sum(k["seconds"] for k in kernels),
                            calls,
                        )
                    )
                fns[f"nkipy {runtime}, {mode}"] = lambda f=fn: step(f, ids)
        times = median_times(fns, warmup=2, repeat=5)
        print_table(
            f"{layers}-layer Llama training step (hidden 256, sequence 64, batch 2)",
            list(times.items()),
        )
        for runtime in args.runtimes:
            ratio = times[f"nkipy {runtime}, dedup"] / times[f"nkipy {runtime}, one kernel"]
            print(f"  {runtime}: dedup ÷ one kernel {ratio:.2f}x")

    print(
        "\nwhat the compiler is handed (xla runtime; the HLO is what neuronx-cc would get)\n"
        f"{'layers':>6} {'mode':<11} {'kernels':>7} {'max HLO':>8} {'total HLO':>9} "
        f"{'compile s':>9} {'calls/step':>10}"
    )
    for layers, mode, kernels, largest, total, seconds, calls in sizes:
        print(
            f"{layers:>6} {mode:<11} {kernels:>7} {largest:>8} {total:>9} "
            f"{seconds:>9.2f} {calls:>10}"
        )


if __name__ == "__main__":
    main()
