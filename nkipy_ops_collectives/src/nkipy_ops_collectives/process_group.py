"""The ``nkipy`` process group: eager collectives on ``nkipy`` tensors, staged through gloo.

Nothing of ours moves bytes between processes (DESIGN.md): a gloo process group built from the
same store, rank, size and timeout does, on host copies of the device tensors (``staging.py``).
This holds for every runtime whose buffers the device can read and write; a runtime with device
collectives (NRT) would replace the staging.

CPU tensors work too, so ``init_process_group("cpu:gloo,nkipy:nkipy")`` works: torch keeps this
group for every device because it is a Python ``ProcessGroup`` (torch's pybind ``Backend``
cannot be subclassed from Python).

Gloo aborts the process when ranks pass different sizes; this group turns every such mismatch
into a ``CollectiveError`` on every rank. How, without a second round trip per collective, is
``agreement.py`` (collectives) and ``p2p.py`` (send/recv). A rank that calls a different
collective, or none, is caught the same way or by the group's timeout. A rank that dies is found
at once, as gloo sees its connection close: the others' waits raise ``CollectiveError`` naming
the collective and the ranks they waited for (``work.Wait``).

Reduce ops gloo lacks are computed here: ``AVG`` as SUM divided by the group size (floating
tensors only, as NCCL's), ``PREMUL_SUM`` (``dist._make_nccl_premul_sum(factor)``, FSDP's
gradient divide factor) as the inputs multiplied by the op's ``factor``, then SUM.

``destroy_process_group`` calls ``shutdown``, which releases the inner gloo group then: its
threads end there, not during the interpreter's finalization (where a gloo thread still running
aborts the process).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

import nkipy_core
from nkipy_core.errors import CollectiveError

from . import NAME
from .agreement import Agreement, Call
from .framing import GATHER, REDUCE, REDUCE_SCATTER, REDUCIBLE, Buffers, Frame, aligned
from .p2p import PointToPoint
from .staging import Staging
from .untraced import untraced
from .work import Wait, Work

#: the host regions of a framed message and the tensors they are copied from (into the
#: message) or to (out of it): ``(host view, tensor)`` pairs, given the message's data part
Regions = Callable[[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]


def _shapes(tensors: Sequence[torch.Tensor]) -> tuple:
    return tuple((t.dtype, tuple(t.shape)) for t in tensors)


def _op_name(op) -> str:
    """``SUM``, ``AVG``, ``PREMUL_SUM``...: of a ``ReduceOp`` or a ``ReduceOp.RedOpType``."""
    return getattr(op, "op", op).name


class _Reduction:
    """A reduce op as gloo runs it: its name, gloo's op, and what this group does around it."""

    def __init__(self, op, tensors: Sequence[torch.Tensor], size: int):
        self.name = _op_name(op)
        self.gloo_op = "SUM" if self.name in ("AVG", "PREMUL_SUM") else self.name
        self.divisor = size if self.name == "AVG" else None
        self.factor = None
        if self.name in ("AVG", "PREMUL_SUM"):
            for t in tensors:
                if not t.is_floating_point():
                    raise CollectiveError(
                        f"ReduceOp.{self.name} needs floating tensors, got {t.dtype}; "
                        "use SUM and divide yourself."
                    )
        if self.name == "PREMUL_SUM":
            factor = op.factor
            self.factor = factor.cpu() if isinstance(factor, torch.Tensor) else factor

    def before(self, host: torch.Tensor) -> None:
        if self.factor is not None:
            host.mul_(self.factor)

    def after(self, host: torch.Tensor) -> None:
        if self.divisor is not None:
            host.div_(self.divisor)


def _one_dtype(what: str, tensors: Sequence[torch.Tensor]) -> torch.dtype:
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise CollectiveError(
            f"nkipy {what} reduces tensors of one dtype, got {[t.dtype for t in tensors]}; "
            "reduce each dtype in its own call."
        )
    return dtypes.pop()


def _segments(tensors: Sequence[torch.Tensor]) -> tuple[list[int], int]:
    """Byte offsets of ``tensors`` in one gather message, each aligned, and its length."""
    offsets, end = [], 0
    for t in tensors:
        offsets.append(end)
        end = aligned(end + t.nbytes)
    return offsets, end


def _bytes_as(region: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """A region of a byte buffer, as elements of ``t``'s dtype (rows stay rows)."""
    return region[..., : t.nbytes].view(t.dtype)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise CollectiveError(message)


@untraced
class NkipyProcessGroup(dist.ProcessGroup):
    """``init_process_group("nkipy")``: collectives for ``nkipy`` (and CPU) tensors."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        nkipy_core.register_device()  # a group for nkipy tensors asks for the device
        torch.nkipy.init()  # more ranks on this host than devices: the runtime's error, here
        self._timeout = timeout
        # ``rank()``/``size()`` go through torch's C++ trampoline: every collective reads these
        self._rank, self._size = rank, size
        #: the ranks every collective of this group waits for
        self._peers = tuple(r for r in range(size) if r != rank)
        # own key prefix: in "cpu:gloo,nkipy:nkipy" torch's gloo rendezvouses in the same store
        self._gloo: dist.ProcessGroup | None = dist.ProcessGroupGloo(
            dist.PrefixStore(NAME, store), rank, size, timeout
        )
        self._agreement = Agreement(rank, size, timeout)
        self._buffers = Buffers()
        self._p2p = PointToPoint(timeout)
        #: works started between ``_start_coalescing`` and ``_end_coalescing``
        self._window: list[Work] | None = None

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return NAME

    # torch keeps a process group's name in its C++ backends, which a Python process group has
    # none of; the functional collectives dynamo traces resolve groups by this name
    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    @property
    def group_name(self) -> str:
        return self._group_name

    @property
    def stats(self) -> dict[str, int]:
        """How this group's collectives were agreed on (``agreement.py``): ``predicted`` (one
        gloo operation), ``probed`` and ``exchanged`` (two); ``mismatched`` calls; entries of its
        bounded state ``forgotten`` and ``plans_forgotten``; kept host buffers
        ``buffers_dropped`` (``framing.Buffers``)."""
        return {**self._agreement.stats, "buffers_dropped": self._buffers.dropped}

    # -- running collectives ------------------------------------------------------------------

    def _inner(self) -> dist.ProcessGroup:
        if self._gloo is None:
            raise CollectiveError(
                "this nkipy process group was destroyed (destroy_process_group); "
                "make a new one with init_process_group or new_group."
            )
        return self._gloo

    def _work(self, what: str, inner, finish, outputs: Sequence[torch.Tensor]) -> Work:
        return self._track(Work(self._wait(what), inner, finish, outputs))

    def _wait(self, what: str) -> Wait:
        return Wait(what, self._peers, self._timeout)

    def _track(self, work: Work) -> Work:
        """``work``, which a coalescing window (``_start_coalescing``) waits for if one is open."""
        if self._window is not None:
            self._window.append(work)
        return work

    def _framed(
        self,
        what: str,
        signature: tuple,
        frame: Frame,
        pack: Regions,
        unpack: Regions,
        outputs: Sequence[torch.Tensor],
        reduction: _Reduction | None = None,
    ) -> Work:
        """Run a framed call (``framing.py``): ``pack`` copies tensors into the message's data,
        ``unpack`` its results into tensors once every rank's digest is checked. Everything
        local (copies, checks) happens before the ranks agree."""
        gloo = self._inner()
        plan = self._agreement.plan(what, signature, frame)
        size = self._size
        message = self._buffers.take(frame, size)
        for region, t in pack(message.data):
            (region if region.shape == t.shape else region.view(t.shape)).copy_(t)
        if reduction is not None:
            reduction.before(message.data)
        message.header.copy_(plan.written)
        self._agreement.begin(plan.call, gloo)
        try:
            inner = frame.start(gloo, message, plan.options)
        except RuntimeError as exc:
            raise CollectiveError(f"nkipy {what} could not start: {exc}") from exc

        def finish() -> None:
            self._agreement.check(plan, message.received)
            if reduction is not None:
                reduction.after(message.results)
            for region, t in unpack(message.results):
                t.copy_(region if region.shape == t.shape else region.reshape(t.shape))
            self._buffers.give(frame, message)

        return self._work(what, [inner], finish, outputs)

    def _unframed(
        self,
        call: Call,
        staging: Staging,
        start: Callable[[dist.ProcessGroup], dist.Work],
        outputs: Sequence[torch.Tensor],
        after: Callable[[], None] = lambda: None,
    ) -> Work:
        gloo = self._inner()
        self._agreement.begin(call, gloo)
        try:
            inner = start(gloo)
        except RuntimeError as exc:
            raise CollectiveError(f"nkipy {call.what} could not start: {exc}") from exc

        def finish() -> None:
            after()
            staging.finish()

        return self._work(call.what, [inner], finish, outputs)

    # -- reductions -----------------------------------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts: dist.AllreduceOptions) -> Work:
        return self._all_reduce("all_reduce", tensors, opts.reduceOp)

    def allreduce_coalesced(
        self, tensors: list[torch.Tensor], opts: dist.AllreduceCoalescedOptions
    ) -> Work:
        """``dist.all_reduce_coalesced`` and ``_coalescing_manager`` around ``all_reduce``s: one
        message for all the tensors."""
        return self._all_reduce("all_reduce_coalesced", tensors, opts.reduceOp)

    def _all_reduce(self, what: str, tensors: list[torch.Tensor], op) -> Work:
        reduction = _Reduction(op, tensors, self._size)
        dtype = _one_dtype(what, tensors)
        signature = (reduction.name, _shapes(tensors))
        if dtype not in REDUCIBLE:  # bool: gloo's own all_reduce on host copies
            staging = Staging()
            host = [staging.update(t) for t in tensors]
            opts = dist.AllreduceOptions()
            opts.reduceOp = getattr(dist.ReduceOp, reduction.gloo_op)
            return self._unframed(
                Call(what, signature), staging, lambda g: g.allreduce(host, opts), tensors
            )
        offsets = [0]
        for t in tensors:
            offsets.append(offsets[-1] + t.numel())
        frame = Frame(REDUCE, dtype, offsets[-1], reduction.gloo_op)

        def regions(data: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
            if len(tensors) == 1:
                return [(data, tensors[0])]
            return [(data[o : o + t.numel()], t) for o, t in zip(offsets, tensors)]

        return self._framed(what, signature, frame, regions, regions, tensors, reduction)

    def reduce_scatter(
        self,
        outputs: list[torch.Tensor],
        input_lists: list[list[torch.Tensor]],
        opts: dist.ReduceScatterOptions,
    ) -> Work:
        _check(
            len(outputs) == 1 and len(input_lists) == 1 and len(input_lists[0]) == self._size,
            f"nkipy reduce_scatter takes one output and a list of {self._size} inputs (one per "
            f"rank), got {len(outputs)} outputs and {[len(ts) for ts in input_lists]} inputs.",
        )
        output, inputs = outputs[0], input_lists[0]
        _check(
            all(t.shape == output.shape and t.dtype == output.dtype for t in inputs),
            f"nkipy reduce_scatter: every input must have the output's shape and dtype "
            f"({output.dtype} {tuple(output.shape)}), got {_shapes(inputs)}.",
        )
        return self._reduce_scatter(
            "reduce_scatter",
            [output],
            lambda chunks: [(chunks[r], t) for r, t in enumerate(inputs)],
            opts,
        )

    def reduce_scatter_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,  # noqa: A002 - torch's name
        opts: dist.ReduceScatterOptions,
    ) -> Work:
        """``dist.reduce_scatter_tensor``: FSDP's gradient reduction (AVG, PREMUL_SUM or SUM)."""
        _check(
            input.numel() == self._size * output.numel() and input.dtype == output.dtype,
            f"nkipy reduce_scatter_tensor: the input must hold {self._size} times the output's "
            f"elements in its dtype, got input {input.dtype} {tuple(input.shape)}, "
            f"output {output.dtype} {tuple(output.shape)}.",
        )
        return self._reduce_scatter(
            "reduce_scatter_tensor",
            [output],
            lambda chunks: [(chunks, input.reshape(self._size, -1))],
            opts,
            input,
        )

    def reduce_scatter_single_coalesced(
        self,
        outputs: list[torch.Tensor],
        inputs: list[torch.Tensor],
        opts: dist.ReduceScatterOptions,
    ) -> Work:
        """``_c10d_functional.reduce_scatter_tensor_coalesced`` and ``_coalescing_manager``
        around ``reduce_scatter_tensor``s: chunk ``r`` of the one message holds chunk ``r`` of
        every input."""
        for out, inp in zip(outputs, inputs, strict=True):
            _check(
                inp.numel() == self._size * out.numel() and inp.dtype == out.dtype,
                f"nkipy reduce_scatter_tensor_coalesced: each input must hold {self._size} "
                f"times its output's elements in its dtype, got {_shapes([inp, out])}.",
            )
        offsets = [0]
        for out in outputs:
            offsets.append(offsets[-1] + out.numel())
        return self._reduce_scatter(
            "reduce_scatter_tensor_coalesced",
            outputs,
            lambda chunks: [
                (chunks[:, o : o + out.numel()], inp.reshape(self._size, -1))
                for o, out, inp in zip(offsets, outputs, inputs)
            ],
            opts,
            *inputs,
            offsets=offsets,
        )

    def _reduce_scatter(
        self,
        what: str,
        outputs: list[torch.Tensor],
        pack: Regions,
        opts: dist.ReduceScatterOptions,
        *inputs: torch.Tensor,
        offsets: Sequence[int] = (0,),
    ) -> Work:
        """A reduce-scatter frame: ``pack`` fills the message's chunks (one row per rank)."""
        reduction = _Reduction(opts.reduceOp, outputs, self._size)
        dtype = _one_dtype(what, outputs)
        _check(
            dtype in REDUCIBLE,
            f"nkipy {what} of {dtype} is not supported; reduce-scatter a numeric dtype.",
        )
        frame = Frame(REDUCE_SCATTER, dtype, sum(t.numel() for t in outputs), reduction.gloo_op)
        signature = (reduction.name, _shapes(outputs), _shapes(inputs))
        return self._framed(
            what,
            signature,
            frame,
            pack,
            lambda result: [(result[o : o + out.numel()], out) for o, out in zip(offsets, outputs)],
            outputs,
            reduction,
        )

    def reduce(self, tensors: list[torch.Tensor], opts: dist.ReduceOptions) -> Work:
        """Only the root's tensor receives the result (the others' keep their values)."""
        reduction = _Reduction(opts.reduceOp, tensors, self._size)
        root = self._rank == opts.rootRank
        staging = Staging()
        # gloo leaves partial sums in the non-roots' buffers: never the caller's tensors
        host = [
            h.clone(memory_format=torch.contiguous_format) if h is t else h
            for h, t in ((Staging.read(t), t) for t in tensors)
        ]
        for t, h in zip(tensors, host):
            reduction.before(h)
            if root:
                staging.later(t, h)
        gloo_opts = dist.ReduceOptions()
        gloo_opts.reduceOp = getattr(dist.ReduceOp, reduction.gloo_op)
        gloo_opts.rootRank, gloo_opts.rootTensor = opts.rootRank, opts.rootTensor
        signature = (reduction.name, _shapes(tensors), opts.rootRank)
        return self._unframed(
            Call("reduce", signature),
            staging,
            lambda g: g.reduce(host, gloo_opts),
            tensors,
            (lambda: reduction.after(host[0])) if root else (lambda: None),
        )

    # -- gathers --------------------------------------------------------------------------------

    def _gather(
        self,
        what: str,
        inputs: Sequence[torch.Tensor],
        unpack: Callable[[list[torch.Tensor]], list[tuple[torch.Tensor, torch.Tensor]]],
        outputs: Sequence[torch.Tensor],
    ) -> Work:
        """Every rank's ``inputs`` in one message of bytes. ``unpack`` gets, for each input, a
        host view of every rank's (one row per rank, in the input's dtype) and says which
        tensors receive which rows."""
        offsets, length = _segments(inputs)

        def rows(data: torch.Tensor) -> list[torch.Tensor]:
            return [_bytes_as(data[:, o:], t) for o, t in zip(offsets, inputs)]

        return self._framed(
            what,
            (_shapes(inputs),),
            Frame(GATHER, torch.uint8, length),
            lambda data: [(_bytes_as(data[o:], t), t) for o, t in zip(offsets, inputs)],
            lambda data: unpack(rows(data)),
            outputs,
        )

    def allgather(
        self,
        output_lists: list[list[torch.Tensor]],
        inputs: list[torch.Tensor],
        opts: dist.AllgatherOptions,
    ) -> Work:
        """``dist.all_gather``: ``output_lists[i][r]`` receives rank ``r``'s ``inputs[i]``."""
        self._check_lists("all_gather", inputs, output_lists)
        return self._gather(
            "all_gather",
            inputs,
            lambda views: [
                (view[r], outs[r])
                for view, outs in zip(views, output_lists)
                for r in range(self._size)
            ],
            [t for ts in output_lists for t in ts],
        )

    def allgather_coalesced(
        self,
        output_lists: list[list[torch.Tensor]],
        inputs: list[torch.Tensor],
        opts: dist.AllgatherOptions,
    ) -> Work:
        """``dist.all_gather_coalesced``: ``output_lists[r][i]`` receives rank ``r``'s
        ``inputs[i]``."""
        by_input = [list(ts) for ts in zip(*output_lists)]
        self._check_lists("all_gather_coalesced", inputs, by_input)
        return self._gather(
            "all_gather_coalesced",
            inputs,
            lambda views: [
                (view[r], outs[r]) for view, outs in zip(views, by_input) for r in range(self._size)
            ],
            [t for ts in output_lists for t in ts],
        )

    def _check_lists(self, what, inputs, by_input: list[list[torch.Tensor]]) -> None:
        _check(
            len(by_input) == len(inputs)
            and all(
                len(outs) == self._size
                and all(o.dtype == t.dtype and o.numel() == t.numel() for o in outs)
                for t, outs in zip(inputs, by_input)
            ),
            f"nkipy {what}: each input needs {self._size} outputs (one per rank) of its dtype "
            f"and size; got inputs {_shapes(inputs)} and outputs "
            f"{[_shapes(outs) for outs in by_input]}.",
        )

    def all_gather_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,  # noqa: A002 - torch's name
        opts: dist.AllgatherOptions,
    ) -> Work:
        """``dist.all_gather_into_tensor``: FSDP's parameter all-gather."""
        return self._gather_into("all_gather_into_tensor", [output], [input])

    def all_gather_single_coalesced(
        self,
        outputs: list[torch.Tensor],
        inputs: list[torch.Tensor],
        opts: dist.AllgatherOptions,
    ) -> Work:
        """What eager ``_c10d_functional.all_gather_into_tensor(_coalesced)`` calls (DTensor's
        ``full_tensor``), and ``_coalescing_manager`` around ``all_gather_into_tensor``s: every
        input in one message, of any dtypes."""
        return self._gather_into("all_gather_into_tensor_coalesced", outputs, inputs)

    def _gather_into(
        self, what: str, outputs: list[torch.Tensor], inputs: list[torch.Tensor]
    ) -> Work:
        for out, inp in zip(outputs, inputs, strict=True):
            _check(
                out.numel() == self._size * inp.numel() and out.dtype == inp.dtype,
                f"nkipy {what}: each output must hold {self._size} times its input's elements "
                f"in its dtype, got {_shapes([inp, out])}.",
            )
        return self._gather(
            what,
            inputs,
            lambda views: [(view, out.view(self._size, -1)) for view, out in zip(views, outputs)],
            outputs,
        )

    def gather(
        self,
        output_lists: list[list[torch.Tensor]],
        inputs: list[torch.Tensor],
        opts: dist.GatherOptions,
    ) -> Work:
        """Only the root passes outputs (one per rank, shaped as the inputs)."""
        root = self._rank == opts.rootRank
        if root:
            self._check_lists("gather", inputs, output_lists)
        staging = Staging()
        host_out = [[staging.output(t) for t in outs] for outs in output_lists]
        host_in = [staging.read(t) for t in inputs]
        return self._unframed(
            Call("gather", (_shapes(inputs), opts.rootRank)),
            staging,
            lambda g: g.gather(host_out, host_in, opts),
            [t for ts in output_lists for t in ts],
        )

    # -- one to all, all to all -----------------------------------------------------------------

    def broadcast(self, tensors: list[torch.Tensor], opts: dist.BroadcastOptions) -> Work:
        staging = Staging()
        # the root's tensors are only read, the others' only written: no needless transfer
        root = self._rank == opts.rootRank
        host = [(staging.read if root else staging.output)(t) for t in tensors]
        return self._unframed(
            Call("broadcast", (_shapes(tensors), opts.rootRank)),
            staging,
            lambda g: g.broadcast(host, opts),
            tensors,
        )

    def scatter(
        self,
        outputs: list[torch.Tensor],
        input_lists: list[list[torch.Tensor]],
        opts: dist.ScatterOptions,
    ) -> Work:
        """DTensor's ``distribute_tensor`` shards a full tensor with this (from ``src_data_rank``)."""
        if self._rank == opts.rootRank:
            self._check_lists("scatter", outputs, input_lists)
        staging = Staging()
        host_out = [staging.output(t) for t in outputs]
        host_in = [[staging.read(t) for t in inputs] for inputs in input_lists]
        return self._unframed(
            Call("scatter", (_shapes(outputs), opts.rootRank)),
            staging,
            lambda g: g.scatter(host_out, host_in, opts),
            outputs,
        )

    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,  # noqa: A002 - torch's name
        output_splits: list[int],
        input_splits: list[int],
        opts: dist.AllToAllOptions,
    ) -> Work:
        """Rows may differ per rank; the exchange checks every pair's split sizes first."""
        size = self._size
        ins = (list(input_splits) or [input.shape[0] // size] * size) if input.dim() else []
        outs = (list(output_splits) or [output.shape[0] // size] * size) if output.dim() else []
        _check(
            input.dim() > 0
            and output.dim() > 0
            and len(ins) == len(outs) == size
            and sum(ins) == input.shape[0]
            and sum(outs) == output.shape[0]
            and input.dtype == output.dtype,
            f"nkipy all_to_all_single: input and output rows must split into {size} parts "
            f"(input {_shapes([input])} by {list(input_splits) or 'even'}, output "
            f"{_shapes([output])} by {list(output_splits) or 'even'}).",
        )
        row_in, row_out = input[0].numel(), output[0].numel()
        staging = Staging()
        host_out, host_in = staging.output(output), staging.read(input)
        call = Call(
            "all_to_all_single",
            (input.dtype, tuple(input.shape[1:])),
            sends=tuple(n * row_in for n in ins),
            receives=tuple(n * row_out for n in outs),
        )
        return self._unframed(
            call,
            staging,
            lambda g: g.alltoall_base(host_out, host_in, output_splits, input_splits, opts),
            [output],
        )

    def alltoall(
        self,
        outputs: list[torch.Tensor],
        inputs: list[torch.Tensor],
        opts: dist.AllToAllOptions,
    ) -> Work:
        """``dist.all_to_all``: ``inputs[p]`` goes to rank ``p``, ``outputs[p]`` comes from it.
        The sizes may differ per pair (gloo's list form takes one size only, so the tensors
        travel flat through its split form; the exchange checks that the sizes pair up)."""
        _check(
            len(inputs) == len(outputs) == self._size
            and len({t.dtype for t in [*inputs, *outputs]}) == 1,
            f"nkipy all_to_all takes {self._size} inputs and outputs (one per rank) of one "
            f"dtype, got {_shapes(inputs)} and {_shapes(outputs)}.",
        )
        sends, receives = [t.numel() for t in inputs], [t.numel() for t in outputs]
        host_in = torch.cat([Staging.read(t).reshape(-1) for t in inputs])
        host_out = torch.empty(sum(receives), dtype=outputs[0].dtype)
        staging = Staging()
        for t, region in zip(outputs, host_out.split(receives)):
            staging.later(t, region)
        call = Call("all_to_all", (inputs[0].dtype,), sends=tuple(sends), receives=tuple(receives))
        return self._unframed(
            call,
            staging,
            lambda g: g.alltoall_base(host_out, host_in, receives, sends, opts),
            outputs,
        )

    def barrier(self, opts: dist.BarrierOptions) -> Work:
        """A framed all-reduce of no data: the digests still catch a rank in another
        collective."""
        frame = Frame(REDUCE, torch.uint8, 0, "SUM")
        return self._framed("barrier", (), frame, lambda _: [], lambda _: [], [])

    # -- point to point ---------------------------------------------------------------------------

    def send(self, tensors: list[torch.Tensor], dstRank: int, tag: int) -> Work:  # noqa: N803
        (t,) = tensors
        return self._track(self._p2p.isend(self._inner(), t, dstRank, tag))

    def recv(self, tensors: list[torch.Tensor], srcRank: int, tag: int) -> Work:  # noqa: N803
        (t,) = tensors
        return self._track(self._p2p.irecv(self._inner(), t, srcRank, tag))

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> Work:
        raise CollectiveError(
            "the nkipy process group receives from a given rank only (its receives check the "
            "sender's shape before taking its data); pass src= to recv/irecv."
        )

    # -- coalescing windows and teardown ----------------------------------------------------------

    def _start_coalescing(self, device: torch.device) -> None:
        """``dist._coalescing_manager(group, device)`` (``batch_isend_irecv`` on NCCL-like
        groups): the works started until ``_end_coalescing`` complete as one."""
        self._window = []

    def _end_coalescing(self, device: torch.device) -> Work:
        works, self._window = self._window or [], None

        def finish() -> None:
            for work in works:
                work.wait()

        outputs = [t for work in works for t in work.outputs]
        return Work(self._wait("coalesced collectives"), (), finish, outputs)

    def shutdown(self) -> None:
        """``destroy_process_group`` calls this: the inner gloo group is released here (its
        worker threads joined, its connections closed) rather than whenever the last reference
        to this group goes, which may be during interpreter finalization."""
        if self._gloo is not None:
            self._p2p.close()
            self._gloo = None

    def abort(self) -> None:
        """``torch.distributed`` aborts groups with this; gloo's abort, then ``shutdown``."""
        if self._gloo is not None:
            self._gloo.abort()
        self.shutdown()
