"""Frames: one gloo message per collective that carries, next to the data, every rank's digest.

A framed collective appends a header to each rank's data, in the message's own dtype. After the
gloo operation every rank reads every rank's digest out of its result (``Frame.digests``) and
writes its data back only if they all equal its own: a rank that passed other tensors (or called
another collective) is found by all ranks at once, with no extra round trip.

- ``REDUCE`` (all_reduce, barrier): the header holds one block of ``DIGEST_WORDS`` per rank. A
  rank writes its digest into its own block and the reduction's identity into the others (0 for
  SUM, 1 for PRODUCT, +inf for MIN...), so after the reduction block ``r`` holds rank ``r``'s
  digest exactly, for every reduce op.
- ``GATHER`` (all_gather in all its forms): each rank's message is its data and its digest,
  as bytes (``uint8``), so tensors of any dtype, and several dtypes, travel in one message. The
  data and the header start on ``ALIGN``-byte boundaries so that host views of any dtype fit.
- ``REDUCE_SCATTER``: every chunk carries a whole ``REDUCE`` header, so the chunk a rank keeps
  holds every rank's digest.

Digest words are integers below 128: exact in every dtype a reduce frame takes (``int8`` ..
``float64``, ``bfloat16``). Frames are what the ranks must agree on *before* sending (gloo aborts
the process when a message is larger than its buffer): ``agreement.py`` sees to that.
"""

from __future__ import annotations

import attrs
import torch
import torch.distributed as dist

from nkipy_core import _torch

#: words of a digest, 7 bits each
DIGEST_WORDS = 8
#: byte boundary of the data segments and header of a gather frame (the largest itemsize)
ALIGN = 16

REDUCE, GATHER, REDUCE_SCATTER = "reduce", "gather", "reduce_scatter"

#: dtypes a reduce frame may have: those in which every digest word and every identity is exact
REDUCIBLE = frozenset(
    {
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.uint8,
        torch.int16,
        torch.int32,
        torch.int64,
    }
)


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of ``ALIGN``."""
    return -(-nbytes // ALIGN) * ALIGN


@attrs.frozen
class Frame:
    """The shape of one framed gloo message; ranks that agree on it send the same bytes.

    ``numel`` counts data elements: of the whole message (``REDUCE``), of one rank's message
    (``GATHER``, bytes, a multiple of ``ALIGN``), of one chunk (``REDUCE_SCATTER``). ``op`` is
    the gloo reduce op's name (``SUM``...; AVG and PREMUL_SUM travel as SUM)."""

    kind: str
    dtype: torch.dtype
    numel: int
    op: str = ""

    def header_numel(self, size: int) -> int:
        return ALIGN if self.kind == GATHER else DIGEST_WORDS * size

    def block(self, size: int) -> int:
        """Elements of one rank's message (``GATHER``) or chunk (``REDUCE_SCATTER``), or of
        the message (``REDUCE``)."""
        return self.numel + self.header_numel(size)

    def message(self, size: int) -> Message:
        """New host buffers for one operation of this frame, and their views."""
        n, block = self.numel, self.block(size)
        if self.kind == REDUCE:  # in place: one buffer
            buffer = torch.empty(block, dtype=self.dtype)
            data, header = buffer[:n], buffer[n:]
            return Message(buffer, buffer, data, header, data, header)
        if self.kind == GATHER:  # gloo gathers into chunks of the input's shape
            inp, out = (
                torch.empty(block, dtype=self.dtype),
                torch.empty(size * block, dtype=self.dtype),
            )
            rows = out.view(size, block)
            return Message(inp, out, inp[:n], inp[n:], rows[:, :n], rows[:, n:])
        inp, out = torch.empty(size, block, dtype=self.dtype), torch.empty(block, dtype=self.dtype)
        return Message(inp.view(-1), out, inp[:, :n], inp[:, n:], out[:n], out[n:])

    def headers(
        self, rank: int, size: int, digest: tuple[int, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What this rank writes into ``Message.header``, and what ``Message.received`` holds
        when every rank wrote ``digest`` (made once per call signature: the group keeps them)."""
        words = torch.tensor(digest, dtype=self.dtype)
        if self.kind == GATHER:
            written = torch.zeros(ALIGN, dtype=self.dtype)
            written[:DIGEST_WORDS] = words
            return written, written.expand(size, ALIGN)
        blocks = torch.full((size, DIGEST_WORDS), identity(self.op, self.dtype), dtype=self.dtype)
        blocks[rank] = words
        written = blocks.view(-1)
        if self.kind == REDUCE_SCATTER:
            written = written.expand(size, -1)
        return written, words.repeat(size)

    def options(self) -> object | None:
        """Gloo's options for this frame's operation (made once per call signature; gloo's
        timeout is this group's)."""
        if self.kind == GATHER:
            return None
        opts = dist.AllreduceOptions() if self.kind == REDUCE else dist.ReduceScatterOptions()
        opts.reduceOp = getattr(dist.ReduceOp, self.op)
        return opts

    def start(self, gloo: dist.ProcessGroup, message: Message, options) -> dist.Work:
        """Start the gloo operation on ``message`` with ``options()``."""
        if self.kind == GATHER:
            return _torch.allgather_base(gloo, message.out, message.inp)
        if self.kind == REDUCE:
            return gloo.allreduce([message.inp], options)
        return _torch.reduce_scatter_base(gloo, message.out, message.inp, options)

    def digests(self, received: torch.Tensor, size: int) -> list[tuple[int, ...]]:
        """Every rank's digest, read from a completed operation's ``Message.received``."""
        words = received.reshape(size, -1)[:, :DIGEST_WORDS]
        # a word that is no digest word (only garbage can be) stands as -1
        return [tuple(int(w) if 0 <= w < 128 else -1 for w in row) for row in words.tolist()]


@attrs.frozen
class Message:
    """The host buffers of one framed operation (``inp``, ``out``: the same for ``REDUCE``) and
    their views: this rank's ``data`` and ``header``, the ``results`` and every rank's header
    ``received`` (one row per rank, or per chunk, where the frame has several)."""

    inp: torch.Tensor
    out: torch.Tensor
    data: torch.Tensor
    header: torch.Tensor
    results: torch.Tensor
    received: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.inp.nbytes + (0 if self.out is self.inp else self.out.nbytes)


#: bytes of host buffers a group keeps between operations (``Buffers``)
KEEP_BYTES = 64 << 20


class Buffers:
    """The host buffers of finished operations, kept for the next operation of the same frame.

    A new buffer of a few MiB is new memory for the allocator to fault in: about 0.8 ms per
    4 MiB message on the benchmark machine, a third of what staging a 4 MiB all_reduce costs.
    A training loop sends the same frames again and again, so each frame's buffer is reused.
    At most ``KEEP_BYTES`` are kept, the least recently used dropped first (``dropped``); a
    frame whose buffer is in use by an operation in flight gets a new one."""

    def __init__(self) -> None:
        self._idle: dict[Frame, Message] = {}
        self._bytes = 0
        self.dropped = 0

    def take(self, frame: Frame, size: int) -> Message:
        message = self._idle.pop(frame, None)
        if message is None:
            return frame.message(size)
        self._bytes -= message.nbytes
        return message

    def give(self, frame: Frame, message: Message) -> None:
        """``message`` is free again (its operation finished and was written back)."""
        if frame in self._idle or message.nbytes > KEEP_BYTES:
            return
        while self._bytes + message.nbytes > KEEP_BYTES:
            self._bytes -= self._idle.pop(next(iter(self._idle))).nbytes
            self.dropped += 1
        self._idle[frame] = message
        self._bytes += message.nbytes


def identity(op: str, dtype: torch.dtype) -> float | int:
    """The value ``x`` with ``op(x, v) == v`` for every ``v`` of ``dtype``."""
    if op in ("SUM", "BOR", "BXOR"):
        return 0
    if op == "PRODUCT":
        return 1
    if dtype.is_floating_point:
        return {"MIN": float("inf"), "MAX": float("-inf")}[op]
    info = torch.iinfo(dtype)
    return {"MIN": info.max, "MAX": info.min, "BAND": -1 if info.min < 0 else info.max}[op]
