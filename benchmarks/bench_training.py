"""Training step time with DDP and FSDP2, 2 ranks on this machine: the same model and step on
CPU tensors in a gloo group (eager, and compiled by inductor) and on the ``nkipy`` device in the
``nkipy`` group (eager, and compiled by nkipy), in the same run.

One step is forward, backward (with the data-parallel gradient reduction) and an AdamW update
of a 4-block residual MLP (dim 256, hidden 1024, batch 32 per rank). Rows:

  cpu eager       the step on CPU tensors, gloo: the baseline (times are ms per step)
  cpu inductor    the same model compiled by inductor (``torch.compile(model)``)
  nkipy eager     ``model.to("nkipy")``: eager ops queued and run as fused kernels on the ``cpu``
                  runtime (``NKIPY_EAGER_FUSION=0``: one cached single-op kernel per op)
  nkipy compiled  ``torch.compile(model, backend="nkipy")`` on the device

On the ``cpu`` runtime the device's kernels are NumPy code, so the ratios measure nkipy's own
overhead on this machine (dispatch, kernel calls, staging of collectives), not Trainium.

Two single-process tables come first: the same step without data parallelism, and AdamW's step
alone, on CPU and on the device, to tell the device's eager-op cost from the collectives'.

Run: python benchmarks/bench_training.py   (it starts itself under torchrun, 2 processes)
"""

from __future__ import annotations

import _timing  # noqa: F401 - first: sets OMP_NUM_THREADS before torch is imported

DIM, HIDDEN, LAYERS, BATCH = 256, 1024, 4, 32


def _model():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = nn.Linear(DIM, HIDDEN), nn.Linear(HIDDEN, DIM)

        def forward(self, x):
            return x + self.down(torch.nn.functional.silu(self.up(x)))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Block() for _ in range(LAYERS))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    torch.manual_seed(0)
    return Model()


def _step(run, params, x):
    import torch

    opt = torch.optim.AdamW(params, lr=1e-3)

    def step():
        opt.zero_grad()
        run(x).pow(2).mean().backward()
        opt.step()

    return step


def _rows(cpu, cpu_inductor, device, device_compiled) -> dict:
    """The four rows' steps, from four wrapped copies of the model (CPU, CPU, nkipy, nkipy)."""
    import torch

    x = torch.randn(BATCH, DIM)
    return {
        "cpu eager": _step(cpu, cpu.parameters(), x),
        "cpu inductor": _step(torch.compile(cpu_inductor), cpu_inductor.parameters(), x),
        "nkipy eager": _step(device, device.parameters(), x.to("nkipy")),
        "nkipy compiled": _step(
            torch.compile(device_compiled, backend="nkipy"),
            device_compiled.parameters(),
            x.to("nkipy"),
        ),
    }


def _ddp_steps(gloo):
    from torch.nn.parallel import DistributedDataParallel as DDP

    return _rows(
        DDP(_model(), process_group=gloo),
        DDP(_model(), process_group=gloo),
        DDP(_model().to("nkipy")),
        DDP(_model().to("nkipy")),
    )


def _fsdp_steps(gloo):
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard

    def sharded(model, mesh):
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    cpu_mesh = DeviceMesh.from_group(gloo, "cpu")
    device_mesh = init_device_mesh("nkipy", (2,))
    return _rows(
        sharded(_model(), cpu_mesh),
        sharded(_model(), cpu_mesh),
        sharded(_model().to("nkipy"), device_mesh),
        sharded(_model().to("nkipy"), device_mesh),
    )


def _worker() -> None:
    import torch.distributed as dist

    dist.init_process_group("nkipy")
    gloo = dist.new_group(backend="gloo")
    if dist.get_rank() == 0:
        print(_timing.machine())
    for title, steps in (("DDP", _ddp_steps(gloo)), ("FSDP2", _fsdp_steps(gloo))):
        # both ranks time the same fixed count: an automatic count could differ and deadlock them
        times = _timing.median_times(steps, warmup=3, repeat=5, number=3)
        if dist.get_rank() == 0:
            _timing.print_table(
                f"{title} training step, {LAYERS}x MLP block {DIM}->{HIDDEN}, batch {BATCH}/rank, 2 ranks",
                list(times.items()),
                unit="ms/call",
                baselines=("cpu eager", "cpu inductor"),
            )
    dist.destroy_process_group()


def _one_process() -> None:
    """The same step without data parallelism, and AdamW's step alone, on CPU and on the
    device: how much of the distributed ratio is the device's eager ops, not the collectives."""
    import torch

    import nkipy_core

    nkipy_core.register_device()
    x = torch.randn(BATCH, DIM)
    steps, updates = {}, {}
    for name, device in (("cpu eager", "cpu"), ("nkipy eager", "nkipy")):
        model = _model().to(device)
        steps[name] = _step(model, model.parameters(), x.to(device))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model(x.to(device)).pow(2).mean().backward()
        updates[name] = opt.step
    print(_timing.machine())
    for title, rows in (
        (f"one process: the training step without data parallelism, batch {BATCH}", steps),
        (f"one process: AdamW's step alone ({LAYERS} blocks' parameters)", updates),
    ):
        times = _timing.median_times(rows, warmup=3, repeat=5, number=3)
        _timing.print_table(title, list(times.items()), unit="ms/call", baselines=("cpu eager",))


def main() -> None:
    import os

    if "RANK" not in os.environ:  # started by hand: first the single-process rows, here
        _one_process()
    _timing.run_ranks(__file__, _worker)


if __name__ == "__main__":
    main()
