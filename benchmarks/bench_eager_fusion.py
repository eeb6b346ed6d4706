"""Eager training steps on the ``nkipy`` device: one kernel per op against eager fusion.

One step is what an eager training loop does: ``zero_grad``, forward, a loss, backward, an AdamW
step, and ``loss.item()``. Models: a 2-layer MLP (16 -> 32 -> 4, batch 8) and the Llama block
of ``nkipy_core.testing.models`` (hidden 64, 4 heads, sequence 16, batch 2; ``--large``: hidden
256, sequence 64, batch 4). Rows, per runtime (each runtime in its own process, as a process
keeps the runtime of its first tensors), all timed in rounds (``_timing.median_times``):

  eager         the step on CPU tensors: the baseline
  inductor      the model compiled by inductor (``torch.compile(model)``), the step around it
  nkipy per-op  ``model.to("nkipy")`` with one kernel per eager op
                (``torch.use_deterministic_algorithms(True)``, as ``NKIPY_EAGER_FUSION=0``)
  nkipy fused   the same program with eager fusion (the default): queued ops run as fused
                kernels where a value is needed

Each nkipy row also gives the kernel launches of one step (``kernel_stats()``) and the first
step's time in a fresh kernel cache (lowering and compiling its kernels). Fused and per-op steps
give the same losses (checked here; the tests check them bit for bit).

Run: python benchmarks/bench_eager_fusion.py [--runtimes cpu xla] [--large] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from _timing import machine, median_times, print_table  # first: it sets the thread count


def _models(large: bool):
    import torch

    from nkipy_core.testing.models import LlamaBlock, LlamaConfig, QuickStartMLP

    config = LlamaConfig(hidden=256, heads=4, seq=64, intermediate=512, batch=4) if large else None
    block = LlamaBlock(config, sdpa=True)
    mlp = QuickStartMLP(16, 32)
    return {
        "MLP": (mlp, torch.randn(8, 16), torch.randn(8, 16)),
        "Llama block": (block, block.example_input(), torch.randn(block.example_input().shape)),
    }


def _stepper(model, x, y, device: str, compiled: bool = False):
    """A function running one training step (returns the loss as a Python float)."""
    import copy

    import torch
    import torch.nn.functional as F

    model = copy.deepcopy(model).to(device)
    forward = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = x.to(device), y.to(device)

    def step() -> float:
        opt.zero_grad()
        loss = F.mse_loss(forward(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def _per_op(fn):
    import torch

    def run():
        torch.use_deterministic_algorithms(True)
        try:
            return fn()
        finally:
            torch.use_deterministic_algorithms(False)

    return run


def _worker(runtime: str, large: bool, repeat: int) -> None:
    """Measure every model on one runtime (this process's)."""
    import torch

    import nkipy_core

    nkipy_core.init_nkipy_backend(runtime=runtime, nkipy_cache=tempfile.mkdtemp(prefix="nkipy-"))
    for name, (model, x, y) in _models(large).items():
        fns, first, launches, losses = {}, {}, {}, {}
        fns["eager"] = _stepper(model, x, y, "cpu")
        try:
            inductor = _stepper(model, x, y, "cpu", compiled=True)
            inductor()
            fns["inductor"] = inductor
        except Exception as exc:  # noqa: BLE001 - reported, the row is n/a
            print(f"inductor: {type(exc).__name__}: {exc}".splitlines()[0])
        for row, wrap in (("nkipy per-op", _per_op), ("nkipy fused", lambda f: f)):
            step = wrap(_stepper(model, x, y, "nkipy"))
            start = time.perf_counter()
            losses[row] = [step()]
            first[row] = time.perf_counter() - start
            losses[row] += [step(), step()]
            nkipy_core.reset_kernel_stats()
            step()
            launches[row] = sum(s.calls for s in nkipy_core.kernel_stats())
            fns[row] = step
        torch.testing.assert_close(losses["nkipy fused"], losses["nkipy per-op"], rtol=1e-6, atol=0)
        times = median_times(fns, warmup=2, repeat=repeat)
        note = {
            row: f"{launches[row]} kernel launches per step; first step {first[row]:.2f} s"
            for row in launches
        }
        print_table(
            f"{name}, eager training step (runtime {runtime})",
            [(row, times.get(row)) for row in ("eager", "inductor", *launches)],
            note=note,
        )
        fused, per_op = times["nkipy fused"], times["nkipy per-op"]
        print(f"fused ÷ per-op: {fused / per_op:.2f}x")
    sys.stdout.flush()
    del torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtimes", nargs="+", default=["cpu", "xla"])
    parser.add_argument("--large", action="store_true", help="a larger Llama block")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker, args.large, args.repeat)
        return
    print(machine())
    for runtime in args.runtimes:
        command = [sys.executable, __file__, "--worker", runtime, "--repeat", str(args.repeat)]
        done = subprocess.run(command + (["--large"] if args.large else []), env=os.environ)
        if done.returncode:
            print(f"runtime {runtime}: the run failed (exit {done.returncode})")


if __name__ == "__main__":
    main()
