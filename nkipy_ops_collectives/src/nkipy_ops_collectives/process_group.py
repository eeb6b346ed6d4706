"""The ``nkipy`` process group: eager collectives on ``nkipy`` tensors, staged through gloo.

Nothing of ours moves bytes between processes (DESIGN.md): a gloo process group built from the
same store, rank, size and timeout does. For a ``nkipy`` tensor each collective copies its
inputs to host, runs gloo on the host copies and, when its work is waited on, copies the results
back into the device tensors. Those copies go through the device (``.cpu()``, ``copy_``), so the
runtime counts them as the transfers they are. This holds for every runtime whose buffers the
device can read and write; a runtime with device collectives (NRT) would replace the staging.

CPU tensors go straight to gloo, so ``init_process_group("cpu:gloo,nkipy:nkipy")`` works: torch
keeps this group for every device because it is a Python ``ProcessGroup`` (torch's pybind
``Backend`` cannot be subclassed from Python).

Before each collective the ranks compare what they pass (the collective, dtypes, the shapes that
must agree) through one small gloo all_gather of a digest: gloo itself aborts the process when a
peer sends more bytes than a buffer holds, so a mismatch is turned into a ``CollectiveError`` on
every rank instead. A rank that calls a different collective, or none, is caught by the group's
timeout.

Gloo has no ``ReduceOp.AVG``; this group computes it as SUM followed by a division by the group
size (floating tensors only, as NCCL's AVG).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

import nkipy_core
from nkipy_core import _torch
from nkipy_core.errors import CollectiveError

from . import NAME


class _Staging:
    """Host stand-ins for the device tensors of one collective, and what to write back."""

    def __init__(self) -> None:
        self.write_back: list[tuple[torch.Tensor, torch.Tensor]] = []

    @staticmethod
    def read(t: torch.Tensor) -> torch.Tensor:
        """An input: its values on host (one device-to-host transfer for a device tensor)."""
        return t.cpu().contiguous() if t.device.type == NAME else t

    def update(self, t: torch.Tensor) -> torch.Tensor:
        """An input the collective overwrites (all_reduce, broadcast)."""
        host = self.read(t)
        if host is not t:
            self.write_back.append((t, host))
        return host

    def output(self, t: torch.Tensor) -> torch.Tensor:
        """An output: host memory of its shape, written back afterwards (no transfer now)."""
        if t.device.type != NAME:
            return t
        host = torch.empty(t.shape, dtype=t.dtype)
        self.write_back.append((t, host))
        return host

    def finish(self) -> None:
        for device_tensor, host in self.write_back:
            device_tensor.copy_(host)  # one host-to-device transfer each
        self.write_back.clear()


class _Work(dist.Work):
    """The gloo work of one collective; ``wait`` also finishes it (write-back, AVG division)."""

    def __init__(self, inner: dist.Work, finish: Callable[[], None], what: str, timeout: timedelta):
        super().__init__()
        self._inner, self._finish, self._what, self._timeout = inner, finish, what, timeout
        self._done = False

    def wait(self, timeout: timedelta | None = None) -> bool:
        if self._done:
            return True
        try:
            if timeout:
                self._inner.wait(timeout)
            else:
                self._inner.wait()
        except RuntimeError as exc:  # gloo's DistBackendError and timeouts are RuntimeErrors
            raise CollectiveError(
                f"nkipy {self._what} failed on this rank: {exc}. Check that every rank of the group "
                "calls the same collectives in the same order with tensors of the same shape and dtype; "
                f"the group gives up after its timeout ({self._timeout}, `init_process_group(timeout=...)`)."
            ) from exc
        self._finish()
        self._done = True
        return True

    def is_completed(self) -> bool:
        return self._done


def _signature(tensors: list[torch.Tensor]) -> tuple:
    """What every rank must agree on for most collectives: dtypes and shapes."""
    return tuple((t.dtype, tuple(t.shape)) for t in tensors)


def _is_avg(op: dist.ReduceOp) -> bool:
    return op == dist.ReduceOp.AVG


class NkipyProcessGroup(dist.ProcessGroup):
    """``init_process_group("nkipy")``: collectives for ``nkipy`` (and CPU) tensors."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        nkipy_core.register_device()  # a group for nkipy tensors asks for the device
        torch.nkipy.init()  # more ranks on this host than devices: the runtime's error, here
        self._timeout = timeout
        # own key prefix: in "cpu:gloo,nkipy:nkipy" torch's gloo rendezvouses in the same store
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore(NAME, store), rank, size, timeout)

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return NAME

    # torch keeps a process group's name in its C++ backends, which a Python process group has
    # none of; the functional collectives dynamo traces resolve groups by this name
    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    @property
    def group_name(self) -> str:
        return self._group_name

    def _agree(self, what: str, signature: tuple) -> None:
        """Raise on every rank unless every rank passes the same ``signature``."""
        mine = torch.tensor([zlib.crc32(repr((what, signature)).encode())], dtype=torch.int64)
        everyone = [torch.empty_like(mine) for _ in range(self.size())]
        _Work(self._gloo.allgather([everyone], [mine]), lambda: None, what, self._timeout).wait()
        if any(not torch.equal(other, mine) for other in everyone):
            raise CollectiveError(
                f"nkipy {what}: the ranks passed different tensors (this rank: {signature}). Every rank "
                "of the group must pass tensors of the same shape and dtype; nothing was exchanged."
            )

    def _run(
        self,
        what: str,
        staging: _Staging,
        start: Callable[[], dist.Work],
        after: Callable[[], None] = lambda: None,
        agree: tuple = (),
    ) -> _Work:
        self._agree(what, agree)
        try:
            inner = start()
        except RuntimeError as exc:
            raise CollectiveError(f"nkipy {what} could not start: {exc}") from exc

        def finish() -> None:
            after()
            staging.finish()

        return _Work(inner, finish, what, self._timeout)

    def _reduce_options(self, cls, opts):
        """Gloo's options for ``opts``, and a divisor: the group size for AVG, else None."""
        gloo_opts = cls()
        gloo_opts.reduceOp = dist.ReduceOp.SUM if _is_avg(opts.reduceOp) else opts.reduceOp
        gloo_opts.timeout = opts.timeout
        return gloo_opts, (self.size() if _is_avg(opts.reduceOp) else None)

    def _averaged(self, tensors: list[torch.Tensor], divisor: int | None) -> Callable[[], None]:
        if divisor is None:
            return lambda: None
        for t in tensors:
            if not t.is_floating_point():
                raise CollectiveError(
                    f"ReduceOp.AVG needs floating tensors, got {t.dtype}; use SUM and divide yourself."
                )

        def divide() -> None:
            for t in tensors:
                t.div_(divisor)

        return divide

    def allreduce(self, tensors: list[torch.Tensor], opts: dist.AllreduceOptions) -> _Work:
        staging = _Staging()
        host = [staging.update(t) for t in tensors]
        gloo_opts, divisor = self._reduce_options(dist.AllreduceOptions, opts)
        return self._run(
            "all_reduce",
            staging,
            lambda: self._gloo.allreduce(host, gloo_opts),
            self._averaged(host, divisor),
            _signature(tensors),
        )

    def allgather(
        self,
        output_lists: list[list[torch.Tensor]],
        inputs: list[torch.Tensor],
        opts: dist.AllgatherOptions,
    ) -> _Work:
        staging = _Staging()
        host_out = [[staging.output(t) for t in outputs] for outputs in output_lists]
        host_in = [staging.read(t) for t in inputs]
        return self._run(
            "all_gather",
            staging,
            lambda: self._gloo.allgather(host_out, host_in, opts),
            agree=_signature(inputs),
        )

    def all_gather_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,  # noqa: A002 - torch's name
        opts: dist.AllgatherOptions,
    ) -> _Work:
        staging = _Staging()
        host_out, host_in = staging.output(output), staging.read(input)
        return self._run(
            "all_gather_into_tensor",
            staging,
            lambda: _torch.allgather_base(self._gloo, host_out, host_in, opts),
            agree=_signature([input]),
        )

    def all_gather_single_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: dist.AllgatherOptions
    ) -> _Work:
        """What eager ``_c10d_functional.all_gather_into_tensor`` calls (DTensor's ``full_tensor``).

        Gloo has no coalesced form from Python: the inputs travel as one flat tensor per rank,
        and each output takes its columns of the gathered rows."""
        if len({t.dtype for t in inputs}) > 1:
            raise CollectiveError(
                f"nkipy all_gather_into_tensor_coalesced needs inputs of one dtype, got {[t.dtype for t in inputs]}; "
                "gather each dtype in its own call."
            )
        staging = _Staging()
        host_out = [staging.output(t) for t in outputs]
        flat_in = torch.cat([staging.read(t).reshape(-1) for t in inputs])
        gathered = torch.empty(self.size() * flat_in.numel(), dtype=flat_in.dtype)

        def split() -> None:
            rows = gathered.view(self.size(), -1)
            for out, part in zip(host_out, rows.split([t.numel() for t in inputs], dim=1)):
                out.view(-1).copy_(part.reshape(-1))

        return self._run(
            "all_gather_into_tensor",
            staging,
            lambda: _torch.allgather_base(self._gloo, gathered, flat_in, opts),
            split,
            _signature(inputs),
        )

    def reduce_scatter(
        self,
        outputs: list[torch.Tensor],
        input_lists: list[list[torch.Tensor]],
        opts: dist.ReduceScatterOptions,
    ) -> _Work:
        staging = _Staging()
        host_out = [staging.output(t) for t in outputs]
        host_in = [[staging.read(t) for t in inputs] for inputs in input_lists]
        gloo_opts, divisor = self._reduce_options(dist.ReduceScatterOptions, opts)
        return self._run(
            "reduce_scatter",
            staging,
            lambda: self._gloo.reduce_scatter(host_out, host_in, gloo_opts),
            self._averaged(host_out, divisor),
            _signature([t for ts in input_lists for t in ts]),
        )

    def reduce_scatter_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,  # noqa: A002
        opts: dist.ReduceScatterOptions,
    ) -> _Work:
        staging = _Staging()
        host_out, host_in = staging.output(output), staging.read(input)
        gloo_opts, divisor = self._reduce_options(dist.ReduceScatterOptions, opts)
        return self._run(
            "reduce_scatter_tensor",
            staging,
            lambda: _torch.reduce_scatter_base(self._gloo, host_out, host_in, gloo_opts),
            self._averaged([host_out], divisor),
            _signature([input]),
        )

    def reduce_scatter_single_coalesced(
        self,
        outputs: list[torch.Tensor],
        inputs: list[torch.Tensor],
        opts: dist.ReduceScatterOptions,
    ) -> _Work:
        """What eager ``_c10d_functional.reduce_scatter_tensor`` calls: one reduce-scatter per
        pair, the earlier ones completed here, the last one returned to wait on."""
        works = [self.reduce_scatter_single(out, inp, opts) for out, inp in zip(outputs, inputs)]
        for work in works[:-1]:
            work.wait()
        return works[-1]

    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,  # noqa: A002
        output_splits: list[int],
        input_splits: list[int],
        opts: dist.AllToAllOptions,
    ) -> _Work:
        staging = _Staging()
        host_out, host_in = staging.output(output), staging.read(input)
        return self._run(
            "all_to_all_single",
            staging,
            lambda: self._gloo.alltoall_base(host_out, host_in, output_splits, input_splits, opts),
            agree=(input.dtype, tuple(input.shape[1:])),
        )  # rows may differ per rank

    def broadcast(self, tensors: list[torch.Tensor], opts: dist.BroadcastOptions) -> _Work:
        staging = _Staging()
        # the root's tensors are only read, the others' only written: no needless transfer
        host = [
            (staging.read if self.rank() == opts.rootRank else staging.output)(t) for t in tensors
        ]
        return self._run(
            "broadcast",
            staging,
            lambda: self._gloo.broadcast(host, opts),
            agree=_signature(tensors),
        )

    def scatter(
        self,
        outputs: list[torch.Tensor],
        input_lists: list[list[torch.Tensor]],
        opts: dist.ScatterOptions,
    ) -> _Work:
        """DTensor's ``distribute_tensor`` shards a full tensor with this (from ``src_data_rank``)."""
        staging = _Staging()
        host_out = [staging.output(t) for t in outputs]
        # only the root passes inputs; every rank receives into outputs of the same shape
        host_in = [[staging.read(t) for t in inputs] for inputs in input_lists]
        return self._run(
            "scatter",
            staging,
            lambda: self._gloo.scatter(host_out, host_in, opts),
            agree=_signature(outputs),
        )

    def barrier(self, opts: dist.BarrierOptions) -> _Work:
        return self._run("barrier", _Staging(), lambda: self._gloo.barrier(opts))
