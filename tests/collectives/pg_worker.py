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
import sys
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

REDUCE_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
_BITWISE = ("BAND", "BOR", "BXOR")


def _data(*shape: int, dtype: torch.dtype = torch.float32, salt: int = 0) -> torch.Tensor:
    """Different values on each rank, the same on every run."""
    g = torch.Generator().manual_seed(1000 * dist.get_rank() + salt)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g).to(dtype)
    return torch.randint(0, 1 << 10, shape, generator=g, dtype=dtype)


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
        """A CPU tensor in the group under test goes to gloo, untouched by the device."""
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
        """A rank waiting for a peer that never joins gets a typed error after the timeout."""
        group = dist.new_group(backend="nkipy", timeout=timedelta(seconds=2))
        if dist.get_rank() == 1:
            return
        _raises_collective_error(
            lambda: dist.all_reduce(torch.ones(2, device="nkipy"), group=group), "timeout"
        )

    def all_gather_coalesced_mixed_dtypes(self) -> None:
        """Coalesced inputs travel as one flat tensor: mixed dtypes are refused on every rank."""
        import torch.distributed._functional_collectives as funcol

        mixed = [torch.ones(2, device="nkipy"), torch.ones(2, dtype=torch.int64, device="nkipy")]
        _raises_collective_error(
            lambda: funcol.all_gather_into_tensor_coalesced(mixed, dist.group.WORLD), "one dtype"
        )

    def all_reduce_avg_integers(self) -> None:
        """AVG of integers is refused on every rank before anything is exchanged."""
        integers = torch.ones(2, dtype=torch.int32, device="nkipy")
        _raises_collective_error(
            lambda: dist.all_reduce(integers, op=dist.ReduceOp.AVG), "floating"
        )


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
