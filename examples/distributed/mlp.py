"""A tensor-parallel MLP whose forward ends in an all-reduce, compiled with nkipy: one kernel.

Run with two processes (CPU is enough: the ``cpu`` runtime runs the kernel and its collective
through gloo)::

    torchrun --nproc-per-node 2 examples/distributed/mlp.py

Each rank holds half of the hidden units (columns of the first layer, rows of the second); the
partial outputs are summed across ranks by ``dist.all_reduce``. Rank 0 checks the result against
the single-process MLP and prints the number of kernels and of ops left on CPU.
"""

from __future__ import annotations

import tempfile
import warnings

import torch
import torch.distributed as dist

import nkipy_core
from nkipy_core import init_nkipy_backend


class ShardedMLP(torch.nn.Module):
    def __init__(self, full: torch.nn.Sequential, rank: int, world: int):
        super().__init__()
        hidden = full[0].out_features // world
        part = slice(rank * hidden, (rank + 1) * hidden)
        self.up = torch.nn.Parameter(full[0].weight[part].detach().clone())
        self.down = torch.nn.Parameter(full[2].weight[:, part].detach().clone())

    def forward(self, x):
        h = torch.relu(x @ self.up.T) @ self.down.T
        dist.all_reduce(h, op=dist.ReduceOp.SUM)
        return h


def main() -> None:
    dist.init_process_group("nkipy")
    # rank and world size come from torch.distributed; one cache per rank keeps the kernel count honest
    init_nkipy_backend(runtime="cpu", nkipy_cache=tempfile.mkdtemp(prefix="nkipy-mlp-"))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    full = torch.nn.Sequential(
        torch.nn.Linear(16, 32, bias=False), torch.nn.ReLU(), torch.nn.Linear(32, 8, bias=False)
    )
    x = torch.randn(4, 16)
    model = ShardedMLP(full, rank, world)
    compiled = torch.compile(model, backend="nkipy", fullgraph=True, dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(x)
    fallbacks = [w for w in caught if issubclass(w.category, nkipy_core.FallbackWarning)]
    torch.testing.assert_close(out, full(x))
    kernels = nkipy_core.cache_stats[
        "lowered_kernels"
    ]  # a fresh cache: every kernel is lowered once
    if rank == 0:
        print(
            f"ranks {world}: matches the single-process MLP; kernels {kernels}; ops on CPU {len(fallbacks)}"
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
