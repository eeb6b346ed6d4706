"""Real ranks for the cpu runtime's collectives: spawned processes joined by a gloo process group.

Each rank builds every ``collective_oracle.CASES`` kernel with ``KernelBuilder`` and ``knp``,
runs it on the cpu runtime (whose communicator calls torch.distributed), and reports its
outputs, plus what torch.distributed itself gives for the collectives it has directly, to the
parent, which compares them with the oracle. Everything is bounded by ``TIMEOUT``.
"""

from __future__ import annotations

import datetime
import multiprocessing
import queue
import traceback
from typing import Any

import numpy as np

#: seconds the whole run may take before the ranks are killed and the test fails
TIMEOUT = 90


def _kernel(prim: str, shape: tuple[int, ...], params: dict[str, Any], groups: tuple):
    from nkipy_core import knp
    from nkipy_core.ir import DType, KernelBuilder, TensorType

    kb = KernelBuilder(prim)
    x = kb.param(TensorType(shape, DType.f32))
    with kb.building(f"test.{prim}"):
        out = getattr(knp, prim)(x, groups=groups, **params)
    return kb.finish([out])


def _torch_direct(
    prim: str, x: np.ndarray, params: dict[str, Any], groups: tuple
) -> np.ndarray | None:
    """torch.distributed's own result for a whole-world group listed in rank order, where it has
    the collective (gloo has no reduce_scatter or all_to_all on CPU)."""
    import torch
    import torch.distributed as dist

    if groups != (tuple(range(dist.get_world_size())),):
        return None
    t = torch.from_numpy(x.copy())
    if prim == "all_reduce":
        dist.all_reduce(
            t,
            op={
                "sum": dist.ReduceOp.SUM,
                "prod": dist.ReduceOp.PRODUCT,
                "max": dist.ReduceOp.MAX,
                "min": dist.ReduceOp.MIN,
            }[params["op"]],
        )
        return t.numpy()
    if prim == "all_gather":
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, t)
        return torch.cat(parts, dim=params["axis"]).numpy()
    if prim == "collective_broadcast":
        dist.broadcast(t, src=params["source"])
        return t.numpy()
    return None


def _rank_main(rank: int, world: int, store: str, groups_list: list, results: Any) -> None:
    try:
        results.put((rank, _rank_outputs(rank, world, store, groups_list)))
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test at once
        results.put((rank, traceback.format_exc()))
        raise


def _rank_outputs(rank: int, world: int, store: str, groups_list: list) -> list:
    import torch.distributed as dist
    from collective_oracle import CASES, operands

    from nkipy_core.runtime.base import CompileOptions
    from nkipy_core.runtime.cpu import CpuRuntime

    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=TIMEOUT // 3),
    )
    try:
        runtime = CpuRuntime()
        outputs = []
        for groups in groups_list:
            for prim, shape, params in CASES:
                x = operands(shape, world)[rank]
                executable = runtime.compile(_kernel(prim, shape, params, groups), CompileOptions())
                (got,) = runtime.run_host(executable, [x])
                outputs.append((got, _torch_direct(prim, x, params, groups)))
        # a broadcast's source may return before its peers have received: leaving now would
        # close the connections under them
        dist.barrier()
        return outputs
    finally:
        dist.destroy_process_group()


def run_ranks(world: int, store: str, groups_list: list) -> dict[int, list]:
    """Each rank's ``(cpu runtime output, torch.distributed output or None)`` per groups and case."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_rank_main, args=(r, world, store, groups_list, results))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    reports = {}
    try:
        for _ in procs:
            rank, report = results.get(timeout=TIMEOUT)
            assert not isinstance(report, str), f"rank {rank} failed:\n{report}"
            reports[rank] = report
    except queue.Empty:
        raise AssertionError(f"the {world} ranks did not report within {TIMEOUT} s") from None
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return reports
