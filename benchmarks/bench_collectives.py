"""Eager ``all_reduce`` latency per message size: the ``nkipy`` process group on ``nkipy``
tensors against plain gloo on CPU tensors, 2 ranks on this machine, in the same run.

Rows, per size (fp32, 1 KiB .. 4 MiB):

  gloo cpu      ``dist.all_reduce`` of a CPU tensor in a gloo group: the baseline
  nkipy         ``dist.all_reduce`` of a ``nkipy`` tensor in the ``nkipy`` group: the copy of the
                tensor to host (into a message that also carries every rank's shape digest), the
                same gloo all_reduce, the digest check, and the copy back

On the ``cpu`` runtime device memory is host memory, so the ratio is the price of the staging
(two copies and the group's Python), not of moving bytes over a bus. After the first calls the
group predicts each call, so the shape check costs no extra message (``agreement.py`` of
nkipy-ops-collectives).

The rows are timed in 15 rounds (``_timing.median_times``): one run of each row per round, so
that a slow minute of this shared machine hits both. Both ranks time the same fixed number of calls
(an automatic count could differ between ranks and deadlock them); rank 0 prints.

Run: python benchmarks/bench_collectives.py   (it starts itself under torchrun, 2 processes)
"""

from __future__ import annotations

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
        times = _timing.median_times(
            {
                "gloo cpu": lambda: dist.all_reduce(host, group=gloo),
                "nkipy": lambda: dist.all_reduce(device),
            },
            number=number,
            repeat=15,
        )
        if dist.get_rank() == 0:
            _timing.print_table(
                f"all_reduce, {nbytes // 1024} KiB fp32, 2 ranks",
                list(times.items()),
                unit="µs/call",
                baselines=("gloo cpu",),
            )
    dist.destroy_process_group()


def main() -> None:
    _timing.run_ranks(__file__, _worker, timeout=600)


if __name__ == "__main__":
    main()
