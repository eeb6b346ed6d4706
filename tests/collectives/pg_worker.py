"""One rank of ``test_process_group.py``, started by torchrun: runs the named cases and writes
``{case: "ok" or the failure}`` to ``<out>/rank<r>.json``.

It imports torch only: ``init_process_group`` must find the ``nkipy`` backend through torch's
backend autoload. Each case runs a collective on ``nkipy`` tensors in the group under test and
the same collective on CPU tensors in a separate plain gloo group, the reference. Gloo has no
``ReduceOp.AVG``: its reference is gloo's SUM divided by the world size.

usage: pg_worker.py BACKEND OUT_DIR CASE...
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

REDUCE_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
_BITWISE = ("BAND", "BOR", "BXOR")


def _data(*shape: int, dtype: torch.dtype = torch.float32, salt: int = 0) -> torch.Tensor:
    """Different values on each rank, the same on every run."""
    return _data_of(dist.get_rank(), *shape, dtype=dtype, salt=salt)


def _same(device_result: torch.Tensor, reference: torch.Tensor) -> None:
    assert device_result.device.type == "nkipy", device_result.device
    torch.testing.assert_close(device_result.cpu(), reference, rtol=0, atol=0)


class Cases:
    def __init__(self, ref: dist.ProcessGroup):
        self.ref = ref
        self.size = dist.get_world_size()

    def all_reduce(self, name: str) -> None:
        dtype = torch.int32 if name in _BITWISE else torch.float32
        x = _data(4, 3, dtype=dtype)
        device = x.to("nkipy")
        dist.all_reduce(device, op=getattr(dist.ReduceOp, name))
        if name == "AVG":
            dist.all_reduce(x, group=self.ref)
            x /= self.size
        else:
            dist.all_reduce(x, op=getattr(dist.ReduceOp, name), group=self.ref)
        _same(device, x)

    def all_reduce_transfers(self) -> None:
        """One device-to-host copy of the input, one host-to-device copy of the result."""
        device = _data(8).to("nkipy")
        before = torch.nkipy.transfer_stats()
        dist.all_reduce(device)
        after = torch.nkipy.transfer_stats()
        assert after["device_to_host"] - before["device_to_host"] == 1, (before, after)
        assert after["host_to_device"] - before["host_to_device"] == 1, (before, after)
        assert after["host_to_device_bytes"] - before["host_to_device_bytes"] == device.nbytes, (
            before,
            after,
        )

    def all_reduce_async(self) -> None:
        x = _data(5)
        device = x.to("nkipy")
        work = dist.all_reduce(device, async_op=True)
        assert work.wait()
        dist.all_reduce(x, group=self.ref)
        _same(device, x)

    def all_gather(self) -> None:
        x = _data(2, 3)
        outs = [torch.empty(2, 3, device="nkipy") for _ in range(self.size)]
        dist.all_gather(outs, x.to("nkipy"))
        ref = [torch.empty(2, 3) for _ in range(self.size)]
        dist.all_gather(ref, x, group=self.ref)
        for out, expected in zip(outs, ref):
            _same(out, expected)

    def all_gather_into_tensor(self) -> None:
        x = _data(3)
        out = torch.empty(3 * self.size, device="nkipy")
        work = dist.all_gather_single(out, x.to("nkipy"), async_op=True)
        work.wait()
        ref = torch.empty(3 * self.size)
        dist.all_gather_single(ref, x, group=self.ref)
        _same(out, ref)

    def all_gather_functional(self) -> None:
        """Eager functional collectives (DTensor's ``full_tensor`` and redistributions) reach the
        group by its name."""
        import torch.distributed._functional_collectives as funcol

        x = _data(2, 3)
        got = funcol.all_gather_tensor(x.to("nkipy"), 0, dist.group.WORLD)
        ref = torch.empty(2 * self.size, 3)
        dist.all_gather_into_tensor(ref, x, group=self.ref)
        _same(funcol.wait_tensor(got), ref)
        y = _data(5, salt=1)  # coalesced: inputs of different shapes travel together
        got = funcol.all_gather_into_tensor_coalesced(
            [x.to("nkipy"), y.to("nkipy")], dist.group.WORLD
        )
        for out, t in zip(got, (x, y)):
            ref = torch.empty(t.shape[0] * self.size, *t.shape[1:])
            dist.all_gather_into_tensor(ref, t, group=self.ref)
            _same(funcol.wait_tensor(out), ref)
        z = _data(2 * self.size, 3, salt=2)
        got = funcol.reduce_scatter_tensor(z.to("nkipy"), "sum", 0, dist.group.WORLD)
        ref = torch.empty(2, 3)
        dist.reduce_scatter_tensor(ref, z, group=self.ref)
        _same(funcol.wait_tensor(got), ref)

    def reduce_scatter(self) -> None:
        inputs = [_data(4, salt=i) for i in range(self.size)]
        out = torch.empty(4, device="nkipy")
        dist.reduce_scatter(out, [t.to("nkipy") for t in inputs])
        ref = torch.empty(4)
        dist.reduce_scatter(ref, inputs, group=self.ref)
        _same(out, ref)

    def reduce_scatter_tensor(self) -> None:
        x = _data(2 * self.size, 3)
        out = torch.empty(2, 3, device="nkipy")
        dist.reduce_scatter_single(out, x.to("nkipy"), op=dist.ReduceOp.MAX)
        ref = torch.empty(2, 3)
        dist.reduce_scatter_single(ref, x, op=dist.ReduceOp.MAX, group=self.ref)
        _same(out, ref)

    def reduce_scatter_tensor_avg(self) -> None:
        x = _data(2 * self.size)
        out = torch.empty(2, device="nkipy")
        dist.reduce_scatter_single(out, x.to("nkipy"), op=dist.ReduceOp.AVG)
        ref = torch.empty(2)
        dist.reduce_scatter_single(ref, x, group=self.ref)
        _same(out, ref / self.size)

    def all_to_all_single(self) -> None:
        x = _data(2 * self.size, 2)
        out = torch.empty_like(x, device="nkipy")
        dist.all_to_all_single(out, x.to("nkipy"))
        ref = torch.empty_like(x)
        dist.all_to_all_single(ref, x, group=self.ref)
        _same(out, ref)

    def all_to_all_single_uneven(self) -> None:
        rank = dist.get_rank()
        in_splits = [rank + 1 + peer for peer in range(self.size)]  # rank r sends r+1+p rows to p
        out_splits = [peer + 1 + rank for peer in range(self.size)]
        x = _data(sum(in_splits))
        out = torch.empty(sum(out_splits), device="nkipy")
        dist.all_to_all_single(out, x.to("nkipy"), out_splits, in_splits)
        ref = torch.empty(sum(out_splits))
        dist.all_to_all_single(ref, x, out_splits, in_splits, group=self.ref)
        _same(out, ref)

    def broadcast(self) -> None:
        x = _data(3, 2, dtype=torch.int64)
        device = x.to("nkipy")
        dist.broadcast(device, src=1)
        dist.broadcast(x, src=1, group=self.ref)
        _same(device, x)

    def scatter(self) -> None:
        chunks = [_data(2, 3, salt=i) for i in range(self.size)] if dist.get_rank() == 1 else None
        out = torch.empty(2, 3, device="nkipy")
        dist.scatter(out, [t.to("nkipy") for t in chunks] if chunks else None, src=1)
        ref = torch.empty(2, 3)
        dist.scatter(ref, chunks, src=1, group=self.ref)
        _same(out, ref)

    def barrier(self) -> None:
        assert dist.barrier(async_op=True).wait()
        dist.barrier()

    def cpu_tensors(self) -> None:
        """A CPU tensor in the group under test is reduced on host, untouched by the device."""
        x = _data(6)
        mine = x.clone()
        before = torch.nkipy.transfer_stats()
        dist.all_reduce(mine)
        assert torch.nkipy.transfer_stats() == before
        dist.all_reduce(x, group=self.ref)
        torch.testing.assert_close(mine, x, rtol=0, atol=0)

    def mismatched_shapes(self) -> None:
        """Ranks disagreeing on the shape get a typed error within the group's timeout."""
        group = dist.new_group(backend="nkipy", timeout=timedelta(seconds=2))
        device = torch.ones(3 + 5 * dist.get_rank(), device="nkipy")
        _raises_collective_error(lambda: dist.all_reduce(device, group=group), "same shape")

    def missed_collective(self) -> None:
        """A rank waiting for a peer that never joins gets a typed error after the timeout.
        The peer stays alive past the timeout: one that exits is found sooner, as a lost
        connection (test_rank_failure.py)."""
        timeout = timedelta(seconds=2)
        group = dist.new_group(backend="nkipy", timeout=timeout)
        if dist.get_rank() == 1:
            time.sleep(1.5 * timeout.total_seconds())
            return
        _raises_collective_error(
            lambda: dist.all_reduce(torch.ones(2, device="nkipy"), group=group),
            "did not take part within the group's timeout",
        )

    def all_gather_coalesced_mixed_dtypes(self) -> None:
        """Coalesced gathers travel as bytes: inputs of several dtypes go in one message."""
        import torch.distributed._functional_collectives as funcol

        mixed = [
            _data(2, 3),
            _data(3, dtype=torch.int64, salt=1),
            _data(5, dtype=torch.bfloat16, salt=2),
            _data(1, dtype=torch.uint8, salt=3),
        ]
        got = funcol.all_gather_into_tensor_coalesced(
            [t.to("nkipy") for t in mixed], dist.group.WORLD
        )
        for out, t in zip(got, mixed):
            ref = torch.empty(t.shape[0] * self.size, *t.shape[1:], dtype=t.dtype)
            dist.all_gather_into_tensor(ref, t, group=self.ref)
            _same(funcol.wait_tensor(out), ref)

    def reduce_scatter_coalesced_mixed_dtypes(self) -> None:
        """A reduction needs one dtype: mixed dtypes are refused on every rank, before anything
        is exchanged."""
        mixed = [torch.ones(4, device="nkipy"), torch.ones(4, dtype=torch.int64, device="nkipy")]
        outs = [torch.empty(2, device="nkipy"), torch.empty(2, dtype=torch.int64, device="nkipy")]
        _raises_collective_error(
            lambda: dist.group.WORLD.reduce_scatter_tensor_coalesced(
                outs, mixed, dist.ReduceScatterOptions()
            ),
            "one dtype",
        )

    # -- futures and DistributedDataParallel ------------------------------------------------------

    def futures(self) -> None:
        """``get_future`` holds the output tensors, written back, as torch's works' futures do;
        ``then``, ``value`` and ``wait`` behave as on any complete future."""
        x = _data(4, 3)
        device = x.to("nkipy")
        future = dist.all_reduce(device, async_op=True).get_future()
        value = future.wait()
        assert isinstance(value, list) and len(value) == 1 and value[0] is device, value
        doubled = future.then(lambda f: f.value()[0] * 2)
        dist.all_reduce(x, group=self.ref)
        _same(device, x)
        _same(doubled.wait(), x * 2)
        out = torch.empty(2 * self.size, 3, device="nkipy")
        y = _data(2, 3, salt=1)
        work = dist.all_gather_into_tensor(out, y.to("nkipy"), async_op=True)
        (got,) = work.get_future().wait()
        ref = torch.empty(2 * self.size, 3)
        dist.all_gather_into_tensor(ref, y, group=self.ref)
        assert got is out
        _same(got, ref)
        assert work.wait() and work.is_completed()

    def ddp(self) -> None:
        """``DistributedDataParallel(model.to("nkipy"))`` trains as DDP on CPU in a gloo group:
        the default reducer, ``fp16_compress_hook`` and ``allreduce_hook`` (all through works'
        futures), each with and without ``no_sync`` gradient accumulation. Weights, inputs and
        the learning rate are small integers and powers of two, so every result is exact."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
            allreduce_hook,
            fp16_compress_hook,
        )

        for hook in (None, fp16_compress_hook, allreduce_hook):
            for accumulate in (False, True):
                got = _train_ddp("nkipy", None, hook, accumulate)
                want = _train_ddp("cpu", self.ref, hook, accumulate)
                for g, w in zip(got, want):
                    assert g.device.type == "nkipy", g.device
                    torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0)

    def objects(self) -> None:
        """Object collectives (checkpointing, logging) run through the group on CPU tensors."""
        rank = dist.get_rank()
        mine = {"rank": rank, "payload": list(range(3 * rank + 1))}
        everyone = [None] * self.size
        dist.all_gather_object(everyone, mine)
        assert everyone == [
            {"rank": r, "payload": list(range(3 * r + 1))} for r in range(self.size)
        ]
        objects = [mine, "x" * (10 * rank)]
        dist.broadcast_object_list(objects, src=1)
        assert objects == [{"rank": 1, "payload": list(range(4))}, "x" * 10], objects

    # -- coalesced collectives ------------------------------------------------------------------

    def all_reduce_coalesced(self) -> None:
        xs = [_data(3, 2), _data(5, salt=1), _data(1, salt=2)]
        device = [x.to("nkipy") for x in xs]
        dist.all_reduce_coalesced(device, op=dist.ReduceOp.MAX)
        dist.all_reduce_coalesced(xs, op=dist.ReduceOp.MAX, group=self.ref)
        for d, x in zip(device, xs):
            _same(d, x)

    def coalescing_manager(self) -> None:
        """``dist._coalescing_manager`` gathers a block's collectives into one coalesced call
        (all_reduce, all_gather_into_tensor, reduce_scatter_tensor; sync and async; with and
        without a device)."""
        xs = [_data(3, 2), _data(5, salt=1)]
        device = [x.to("nkipy") for x in xs]
        with dist._coalescing_manager():
            for d in device:
                dist.all_reduce(d)
        for d, x in zip(device, xs):
            dist.all_reduce(x, group=self.ref)
            _same(d, x)
        ins = [_data(2, salt=3), _data(3, 2, salt=4)]
        outs = [torch.empty(t.shape[0] * self.size, *t.shape[1:], device="nkipy") for t in ins]
        with dist._coalescing_manager(async_ops=True) as cm:
            for out, t in zip(outs, ins):
                dist.all_gather_into_tensor(out, t.to("nkipy"))
        cm.wait()
        for out, t in zip(outs, ins):
            ref = torch.empty(out.shape)
            dist.all_gather_into_tensor(ref, t, group=self.ref)
            _same(out, ref)
        ins = [_data(2 * self.size, salt=5), _data(self.size, 3, salt=6)]
        outs = [torch.empty(t.shape[0] // self.size, *t.shape[1:], device="nkipy") for t in ins]
        with dist._coalescing_manager(async_ops=True) as cm:
            for out, t in zip(outs, ins):
                dist.reduce_scatter_tensor(out, t.to("nkipy"), op=dist.ReduceOp.AVG)
        cm.wait()
        for out, t in zip(outs, ins):
            ref = torch.empty(out.shape)
            dist.reduce_scatter_tensor(ref, t, group=self.ref)
            _same(out, ref / self.size)
        # with a device, torch also opens and closes a coalescing window on the group
        xs = [_data(3, salt=7), _data(2, 2, salt=8)]
        device = [x.to("nkipy") for x in xs]
        with dist._coalescing_manager(device=torch.device("nkipy"), async_ops=True) as cm:
            for d in device:
                dist.all_reduce(d, op=dist.ReduceOp.MIN)
        cm.wait()
        for d, x in zip(device, xs):
            dist.all_reduce(x, op=dist.ReduceOp.MIN, group=self.ref)
            _same(d, x)

    def coalesced_methods(self) -> None:
        """The group's coalesced methods under both of torch's names (``allgather_into_tensor_
        coalesced``/``reduce_scatter_tensor_coalesced`` reach ``all_gather_single_coalesced``/
        ``reduce_scatter_single_coalesced`` through torch), the functional
        ``reduce_scatter_tensor_coalesced`` and ``all_gather_coalesced``."""
        import torch.distributed._functional_collectives as funcol

        group = dist.group.WORLD
        ins = [_data(2, 2), _data(3, salt=1)]
        for method in (group.all_gather_single_coalesced, group.allgather_into_tensor_coalesced):
            outs = [torch.empty(t.shape[0] * self.size, *t.shape[1:], device="nkipy") for t in ins]
            method(outs, [t.to("nkipy") for t in ins], _allgather_options()).wait()
            for out, t in zip(outs, ins):
                ref = torch.empty(out.shape)
                dist.all_gather_into_tensor(ref, t, group=self.ref)
                _same(out, ref)
        ins = [_data(2 * self.size, 2, salt=2), _data(self.size, salt=3)]
        for method in (
            group.reduce_scatter_single_coalesced,
            group.reduce_scatter_tensor_coalesced,
        ):
            outs = [torch.empty(t.shape[0] // self.size, *t.shape[1:], device="nkipy") for t in ins]
            method(outs, [t.to("nkipy") for t in ins], dist.ReduceScatterOptions()).wait()
            for out, t in zip(outs, ins):
                ref = torch.empty(out.shape)
                dist.reduce_scatter_tensor(ref, t, group=self.ref)
                _same(out, ref)
        got = funcol.reduce_scatter_tensor_coalesced(
            [t.to("nkipy") for t in ins], "sum", [0, 0], group
        )
        for out, t in zip(got, ins):
            ref = torch.empty(t.shape[0] // self.size, *t.shape[1:])
            dist.reduce_scatter_tensor(ref, t, group=self.ref)
            _same(funcol.wait_tensor(out), ref)
        outs = [[torch.empty(t.shape, device="nkipy") for t in ins] for _ in range(self.size)]
        dist.all_gather_coalesced(outs, [t.to("nkipy") for t in ins])
        refs = [[torch.empty(t.shape) for t in ins] for _ in range(self.size)]
        dist.all_gather_coalesced(refs, ins, group=self.ref)
        for per_rank, ref_rank in zip(outs, refs):
            for out, ref in zip(per_rank, ref_rank):
                _same(out, ref)

    def premul_sum(self) -> None:
        """``ReduceOp.PREMUL_SUM``: each rank's input times the factor, summed (all_reduce and
        reduce_scatter_tensor; a float factor, FSDP's ``ReduceOp.PREMUL_SUM(1 / factor)`` form,
        and a tensor factor)."""
        for op, factor in (
            (dist._make_nccl_premul_sum(0.25), 0.25),
            (dist.ReduceOp.PREMUL_SUM(1 / 3), 1 / 3),
            (dist._make_nccl_premul_sum(torch.tensor([0.5])), 0.5),
        ):
            x = _data(4, 3)
            device = x.to("nkipy")
            dist.all_reduce(device, op=op)
            ref = x * factor
            dist.all_reduce(ref, group=self.ref)
            _same(device, ref)
            y = _data(2 * self.size, 3, salt=1, dtype=torch.bfloat16)
            out = torch.empty(2, 3, dtype=torch.bfloat16, device="nkipy")
            dist.reduce_scatter_tensor(out, y.to("nkipy"), op=op)
            ref = torch.empty(2, 3, dtype=torch.bfloat16)
            dist.reduce_scatter_tensor(ref, y * factor, group=self.ref)
            _same(out, ref)
        _raises_collective_error(
            lambda: dist.all_reduce(
                torch.ones(2, dtype=torch.int32, device="nkipy"),
                op=dist._make_nccl_premul_sum(2.0),
            ),
            "floating",
        )

    # -- rooted collectives, all-to-all, point to point -----------------------------------------

    def reduce(self) -> None:
        """Only the root's tensor changes."""
        for op in ("SUM", "MAX", "AVG"):
            x = _data(3, 2, salt=len(op))
            device = x.to("nkipy")
            dist.reduce(device, dst=1, op=getattr(dist.ReduceOp, op))
            ref = x.clone()
            dist.reduce(
                ref, dst=1, op=getattr(dist.ReduceOp, "SUM" if op == "AVG" else op), group=self.ref
            )
            if dist.get_rank() == 1:
                _same(device, ref / self.size if op == "AVG" else ref)
            else:
                _same(device, x)

    def gather(self) -> None:
        x = _data(2, 3)
        root = dist.get_rank() == 0
        outs = [torch.empty(2, 3, device="nkipy") for _ in range(self.size)] if root else None
        dist.gather(x.to("nkipy"), outs, dst=0)
        refs = [torch.empty(2, 3) for _ in range(self.size)] if root else None
        dist.gather(x, refs, dst=0, group=self.ref)
        for out, ref in zip(outs or [], refs or []):
            _same(out, ref)

    def all_to_all(self) -> None:
        """The list form, with sizes that differ per pair of ranks."""
        rank = dist.get_rank()
        ins = [_data(rank + 1 + peer, 2, salt=peer) for peer in range(self.size)]
        outs = [torch.empty(peer + 1 + rank, 2, device="nkipy") for peer in range(self.size)]
        dist.all_to_all(outs, [t.to("nkipy") for t in ins])
        # gloo's own list form takes one size only: its split form is the reference
        ref = torch.empty(sum(out.shape[0] for out in outs), 2)
        dist.all_to_all_single(
            ref,
            torch.cat(ins),
            [out.shape[0] for out in outs],
            [t.shape[0] for t in ins],
            group=self.ref,
        )
        for out, expected in zip(outs, ref.split([out.shape[0] for out in outs])):
            _same(out, expected)

    def all_to_all_split_mismatch(self) -> None:
        """Split sizes that do not pair up are an error on every rank, before any data moves
        (gloo would abort the process)."""
        x = torch.ones(4, device="nkipy")
        out = torch.empty(4, device="nkipy")
        splits = [1, 3] if dist.get_rank() == 0 else [2, 2]
        _raises_collective_error(
            lambda: dist.all_to_all_single(out, x, splits, splits), "split sizes"
        )

    def send_recv(self) -> None:
        """Blocking and async point to point, both directions, device and CPU tensors."""
        rank, peer = dist.get_rank(), 1 - dist.get_rank()
        x = _data(3, 2)
        got = torch.empty(3, 2, device="nkipy")
        if rank == 0:
            dist.send(x.to("nkipy"), peer)
            dist.recv(got, peer)
        else:
            dist.recv(got, peer)
            dist.send(x.to("nkipy"), peer)
        want = _data_of(peer, 3, 2)
        _same(got, want)
        cpu = torch.empty(5, dtype=torch.int64)
        works = [dist.isend(_data(5, dtype=torch.int64, salt=1), peer, tag=7)]
        works.append(dist.irecv(cpu, peer, tag=7))
        for work in reversed(works):
            work.wait()
        torch.testing.assert_close(
            cpu, _data_of(peer, 5, dtype=torch.int64, salt=1), rtol=0, atol=0
        )

    def batch_isend_irecv(self) -> None:
        """Receives listed before sends, waited on in any order: no deadlock (pipelining)."""
        rank, peer = dist.get_rank(), 1 - dist.get_rank()
        got = [torch.empty(4, device="nkipy"), torch.empty(2, 3, device="nkipy")]
        ops = [dist.P2POp(dist.irecv, t, peer) for t in got]
        ops += [
            dist.P2POp(dist.isend, _data(4, salt=1).to("nkipy"), peer),
            dist.P2POp(dist.isend, _data(2, 3, salt=2).to("nkipy"), peer),
        ]
        works = dist.batch_isend_irecv(ops)
        for work in works[::-1] if rank == 0 else works:
            work.wait()
        _same(got[0], _data_of(peer, 4, salt=1))
        _same(got[1], _data_of(peer, 2, 3, salt=2))

    def send_recv_mismatch(self) -> None:
        """A receive of another shape than was sent is a typed error on the receiver (the
        sender's send completes); the pair goes on working."""
        rank, peer = dist.get_rank(), 1 - dist.get_rank()
        if rank == 0:
            dist.send(torch.ones(8, device="nkipy"), peer)
            dist.send(torch.full((2,), 5.0, device="nkipy"), peer)
        else:
            small = torch.zeros(3, device="nkipy")
            _raises_collective_error(lambda: dist.recv(small, peer), "shape or dtype")
            _same(small, torch.zeros(3))
            then = torch.empty(2, device="nkipy")
            dist.recv(then, peer)
            _same(then, torch.full((2,), 5.0))

    # -- the agreement: one gloo operation per collective, and no mismatch crashes gloo --------

    def predicted(self) -> None:
        """Once the ranks have seen a sequence of collectives, each call is one gloo operation
        (the group's ``predicted`` count) and still gives the right values."""
        group = dist.new_group(backend="nkipy")
        shapes = [(4,), (2, 3), (4,)]
        for step in range(4):
            before = dict(group.stats)
            for i, shape in enumerate(shapes):
                x = _data(*shape, salt=10 * step + i)
                device = x.to("nkipy")
                dist.all_reduce(device, group=group)
                dist.all_reduce(x, group=self.ref)
                _same(device, x)
                out = torch.empty(2 * self.size, device="nkipy")
                dist.all_gather_into_tensor(out, _data(2, salt=i).to("nkipy"), group=group)
            predicted = group.stats["predicted"] - before["predicted"]
            if step >= 2:
                assert predicted == 2 * len(shapes), (step, before, group.stats)
        dist.destroy_process_group(group)

    def mismatch_after_agreement(self) -> None:
        """Shapes, dtypes and collectives the ranks have agreed on before, now passed
        differently by one rank: every rank gets the typed error (gloo never sees two sizes),
        nothing is written, and the group goes on working."""
        group = dist.new_group(backend="nkipy", timeout=timedelta(seconds=20))
        rank = dist.get_rank()
        a, b = torch.ones(4, device="nkipy"), torch.ones(16, device="nkipy")
        out = torch.empty(8 * self.size, device="nkipy")
        for _ in range(3):  # every call below has been agreed on, and its successor too
            dist.all_reduce(a, group=group)
            dist.all_reduce(b, group=group)
            dist.all_gather_into_tensor(out, b[:8], group=group)
        a.fill_(1), b.fill_(1)
        mine = a if rank == 0 else b  # rank 0 as predicted, rank 1 another agreed shape
        _raises_collective_error(lambda: dist.all_reduce(mine, group=group), "same shape")
        _same(mine, torch.ones(mine.shape))
        # rank 1 gathers where rank 0 reduces: another collective, same bytes or not
        other = (
            (lambda: dist.all_reduce(b, group=group))
            if rank == 0
            else (lambda: dist.all_gather_into_tensor(out, b[:8], group=group))
        )
        _raises_collective_error(other, "same shape")
        dtype = torch.float32 if rank == 0 else torch.int32
        _raises_collective_error(
            lambda: dist.all_reduce(torch.ones(4, dtype=dtype, device="nkipy"), group=group),
            "same shape",
        )
        x = _data(4, salt=7)
        device = x.to("nkipy")
        dist.all_reduce(device, group=group)
        dist.all_reduce(x, group=self.ref)
        _same(device, x)
        assert group.stats["mismatched"] == 3, group.stats
        dist.destroy_process_group(group)

    def destroy_releases_gloo(self) -> None:
        """``destroy_process_group`` shuts the group's inner gloo group down there and then:
        its worker threads are gone, and the destroyed group says so if it is used again; an
        aborted group (torch aborts through the group's C++ side) releases it too."""
        for release in (dist.destroy_process_group, dist.distributed_c10d._abort_process_group):
            before = set(_threads())
            group = dist.new_group(backend="nkipy")
            dist.all_reduce(torch.ones(2, device="nkipy"), group=group)
            workers = _new_gloo_workers(before)
            release(group)
            alive = workers & set(_threads())
            assert not alive, f"gloo's threads {alive} outlived {release.__name__}"
        _raises_collective_error(
            lambda: group.allreduce([torch.ones(2)], dist.AllreduceOptions()), "destroyed"
        )

    def all_reduce_avg_integers(self) -> None:
        """AVG of integers is refused on every rank before anything is exchanged."""
        integers = torch.ones(2, dtype=torch.int32, device="nkipy")
        _raises_collective_error(
            lambda: dist.all_reduce(integers, op=dist.ReduceOp.AVG), "floating"
        )


def _threads() -> dict[str, str]:
    """This process's threads: id -> name."""
    threads = {}
    for task in os.listdir("/proc/self/task"):
        try:
            threads[task] = Path(f"/proc/self/task/{task}/comm").read_text().strip()
        except FileNotFoundError:  # a thread that just ended
            pass
    return threads


def _new_gloo_workers(before: set[str]) -> set[str]:
    """The two worker threads of the gloo group made since ``before`` (they name themselves
    once they run)."""
    deadline = time.monotonic() + 10
    while True:
        new = {t for t, name in _threads().items() if t not in before and name == "pt_gloo_runloop"}
        if len(new) >= 2 or time.monotonic() > deadline:
            assert len(new) == 2, new
            return new
        time.sleep(0.01)


def _data_of(rank: int, *shape: int, dtype: torch.dtype = torch.float32, salt: int = 0):
    """What ``_data`` gives on ``rank``."""
    g = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g).to(dtype)
    return torch.randint(0, 1 << 10 if dtype.itemsize > 1 else 100, shape, generator=g, dtype=dtype)


def _allgather_options():
    """Options for a group's own gather methods (``AllgatherOptions`` is not re-exported by
    torch.distributed)."""
    return dist.distributed_c10d.AllgatherOptions()


def _train_ddp(device: str, group, hook, accumulate: bool) -> list[torch.Tensor]:
    """Two SGD steps of a DDP-wrapped ``nn.Linear`` on ``device`` in ``group``."""
    rank = dist.get_rank()
    model = torch.nn.Linear(4, 3)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-2, 3, p.shape, generator=g).float())
    ddp = DistributedDataParallel(model.to(device), process_group=group)
    if hook is not None:
        ddp.register_comm_hook(group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.125)

    def loss(step: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(100 * rank + step)
        x = torch.randint(-2, 3, (2, 4), generator=g).float().to(device)
        y = torch.randint(-2, 3, (2, 3), generator=g).float().to(device)
        return ((ddp(x) - y) ** 2).sum()

    for step in range(2):
        opt.zero_grad()
        if accumulate:
            with ddp.no_sync():
                loss(10 + step).backward()
        loss(step).backward()
        opt.step()
    return [p.detach() for p in ddp.module.parameters()]


def _raises_collective_error(run, says: str) -> None:
    """``run()`` raises the typed ``CollectiveError`` (any other exception fails the case)
    and its message says ``says``."""
    from nkipy_core.errors import CollectiveError

    try:
        run()
    except CollectiveError as exc:
        assert says in str(exc), str(exc)
    else:
        raise AssertionError(f"expected a CollectiveError saying {says!r}; the call returned")


def _case(cases: Cases, name: str):
    method, _, arg = name.partition(":")
    return (lambda: getattr(cases, method)(arg)) if arg else getattr(cases, method)


def main() -> None:
    backend, out_dir, *names = sys.argv[1:]
    dist.init_process_group(backend, timeout=timedelta(seconds=20))
    cases = Cases(dist.new_group(backend="gloo"))
    results = {}
    for name in names:
        try:
            _case(cases, name)()
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - reported per case
            results[name] = traceback.format_exc()
    Path(out_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps(results))
    if "missed_collective" not in names:  # a timed-out gloo group cannot be torn down cleanly
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
