"""Eager ``all_reduce`` latency per message size: the ``nkipy`` process group on ``nkipy``
tensors against plain gloo on CPU tensors, 2 ranks on this machine, in the same run.

Rows, per size (fp32, 1 KiB .. 4 MiB):

  gloo cpu      ``dist.all_reduce`` of a CPU tensor in a gloo group: the baseline
  nkipy         ``dist.all_reduce`` of a ``nkipy`` tensor in the ``nkipy`` group: the digest
                exchange that checks every rank passes the same shape, the device-to-host copy,
                the same gloo all_reduce, and the host-to-device copy back

On the ``cpu`` runtime device memory is host memory, so the ratio is the price of the staging
(two copies and one small extra collective), not of moving bytes over a bus.

Both ranks time the same fixed number of calls (an automatic count could differ between ranks and
deadlock them); rank 0 prints.

Run: python benchmarks/bench_collectives.py   (it starts itself under torchrun, 2 processes)
"""

from __future__ import annotations

import os
import subprocess
import sys

import _timing  # noqa: F401 - first: sets OMP_NUM_THREADS before torch is imported

SIZES = [1 << k for k in range(10, 23, 2)]  # bytes: 1 KiB, 4 KiB, ..., 4 MiB


def _worker() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("nkipy")
    gloo = dist.new_group(backend="gloo")
    if dist.get_rank() == 0:
        print(_timing.machine())
    for nbytes in SIZES:
        host = torch.ones(nbytes // 4)
        device = host.to("nkipy")
        number = max(5, min(200, (1 << 22) // nbytes))
        rows = [
            (
                "gloo cpu",
                _timing.median_time(lambda: dist.all_reduce(host, group=gloo), number=number),
            ),
            ("nkipy", _timing.median_time(lambda: dist.all_reduce(device), number=number)),
        ]
        if dist.get_rank() == 0:
            _timing.print_table(
                f"all_reduce, {nbytes // 1024} KiB fp32, 2 ranks",
                rows,
                unit="µs/call",
                baselines=("gloo cpu",),
            )
    dist.destroy_process_group()


def main() -> None:
    if "RANK" in os.environ:
        _worker()
        return
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        __file__,
    ]
    sys.exit(subprocess.run(command, timeout=600).returncode)


if __name__ == "__main__":
    main()
