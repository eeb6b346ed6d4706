"""How the ranks of a ``nkipy`` group agree on what they pass, without a round trip each time.

Gloo aborts the process (SIGABRT, no exception) when a peer's message is larger than the buffer
it lands in: a rank that passes another shape, or calls another collective, would kill every
rank. So no rank may start a gloo operation whose size the ranks have not agreed on, and a
mismatch must become a ``CollectiveError`` on every rank.

Each call is a ``Call``: a digest of what the ranks must agree on (the collective, dtypes,
shapes, reduce op) and, for the collectives that can carry it, the ``Frame`` its message will
have (``framing.py``). Every rank keeps the same ``Agreement`` state, the recent calls the
ranks agreed on, and from it predicts the next call: the history is read again from an earlier
point where the same calls came, as long as the new calls keep matching it; after a call that
does not, from just after the last earlier occurrence of the last two calls (else of the last
one). A training step repeats its sequence of collectives, so after one step the prediction
follows the previous step call by call, even where a call recurs within a step with different
successors. Every rank computes the same prediction, so all ranks start the same kind of gloo
operation:

- **predicted** (one gloo operation): the prediction is framed and this call is the prediction.
  The call runs framed at once; every rank reads every digest from the result before writing
  anything back. A training loop repeats its collectives, so after the first steps nearly every
  call takes this path.
- **probe** (two): the prediction is framed but this call differs. The rank sends the predicted
  frame, filled with zeros, with its own digest: its message is the size the predicted ranks'
  are, so gloo stays safe whatever the others called. If every digest equals this call's, all
  ranks moved on together and the call runs; otherwise every rank raises (the predicted ranks
  when they wait). The probe costs one message of the predicted size.
- **exchange** (two): no prediction, or an unframed one. Every rank all-gathers a fixed-size
  vector (digest, then the elements it sends each peer and expects from it, for all-to-all) and
  checks it before anything else moves.

The state changes identically on every rank whatever the outcome (a mismatch found by a probe
advances every rank as the predicted ranks advanced), so a rank that raised can go on with the
next collective and still pair with its peers. The state is bounded (the last ``MAX_CALLS``
calls, and as many remembered occurrences, the oldest forgotten first, the same on every rank).
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

import attrs
import torch
import torch.distributed as dist

from nkipy_core import _torch
from nkipy_core.errors import CollectiveError

from .framing import DIGEST_WORDS, Frame
from .work import Wait, wait_all

#: calls remembered per group (a model's collectives per step are far fewer)
MAX_CALLS = 4096


def digest(what: str, signature: tuple) -> tuple[int, ...]:
    """``DIGEST_WORDS`` words of 7 bits (56 bits) of a hash of what the ranks must agree on."""
    value = int.from_bytes(
        hashlib.blake2b(repr((what, signature)).encode(), digest_size=7).digest(), "little"
    )
    return tuple((value >> (7 * i)) & 0x7F for i in range(DIGEST_WORDS))


@attrs.frozen(cache_hash=True)
class Call:
    """One collective as this rank calls it.

    ``sends``/``receives`` are the elements this rank sends to / expects from each peer, for
    the all-to-all collectives whose sizes differ per rank (checked in the exchange)."""

    what: str
    signature: tuple = attrs.field(eq=False)
    frame: Frame | None = None
    sends: tuple[int, ...] = attrs.field(default=(), eq=False)
    receives: tuple[int, ...] = attrs.field(default=(), eq=False)
    digest: tuple[int, ...] = attrs.field(init=False)

    @digest.default
    def _digest(self) -> tuple[int, ...]:
        return digest(self.what, self.signature)


@attrs.frozen
class Plan:
    """A framed call with the header this rank writes and the header that says all agree."""

    call: Call
    written: torch.Tensor
    expected: torch.Tensor
    options: object | None


class Agreement:
    """The agreement state of one group, and the steps that need a gloo round trip."""

    def __init__(self, rank: int, size: int, timeout: timedelta):
        self._rank, self._size, self._timeout = rank, size, timeout
        self._peers = tuple(r for r in range(size) if r != rank)
        #: the calls agreed on (or assumed, see the module docstring) by position, the last
        #: ``MAX_CALLS`` of them, and how many there were
        self._calls: dict[int, Call] = {}
        self._count = 0
        #: the last position of each call and pair of consecutive calls, least recent first
        self._seen: dict[tuple[Call, ...], int] = {}
        #: the position whose call is predicted next
        self._follow: int | None = None
        #: framed calls by signature: their digest and headers are made once
        self._plans: dict[tuple, Plan] = {}
        #: how calls were agreed (``predicted``, ``probed``, ``exchanged``), mismatches found,
        #: occurrences and plans forgotten (the oldest, beyond ``MAX_CALLS`` of each)
        self.stats = dict.fromkeys(
            ("predicted", "probed", "exchanged", "mismatched", "forgotten", "plans_forgotten"), 0
        )

    def plan(self, what: str, signature: tuple, frame: Frame) -> Plan:
        """The framed call ``what`` of ``signature`` (made once, then looked up)."""
        key = (what, signature, frame)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= MAX_CALLS:
                del self._plans[next(iter(self._plans))]
                self.stats["plans_forgotten"] += 1
            call = Call(what, signature, frame)
            written, expected = frame.headers(self._rank, self._size, call.digest)
            plan = self._plans[key] = Plan(call, written, expected, frame.options())
        return plan

    def begin(self, call: Call, gloo: dist.ProcessGroup) -> None:
        """Agree on ``call`` before its data moves, or raise ``CollectiveError`` on every rank.

        A framed call may be agreed on only by its own digests, once it completed: the group
        ``check``s them before writing anything back."""
        predicted = self._calls.get(self._follow) if self._follow is not None else None
        if predicted is not None and predicted.frame is not None:
            if predicted == call:
                self._advance(call)
                self.stats["predicted"] += 1
                return
            digests = self._probe(predicted.frame, call, gloo)
            if any(d != call.digest for d in digests):
                self._advance(predicted)  # as the ranks that ran the prediction did
                raise self._mismatch(call, digests)
            self.stats["probed"] += 1
            if call.frame is not None:
                self._advance(call)
                return
        self._exchange(call, gloo)
        self._advance(call)

    def check(self, plan: Plan, header: torch.Tensor) -> None:
        """After a framed call: raise unless every rank ran it (its output ``header``)."""
        if not torch.equal(header, plan.expected):
            frame = plan.call.frame
            assert frame is not None
            raise self._mismatch(plan.call, frame.digests(header, self._size))

    def _advance(self, call: Call) -> None:
        """``call`` is the next call: the prediction moves on, or starts again (see the module
        docstring)."""
        position = self._count
        previous = self._calls.get(position - 1)
        if self._follow is not None and self._calls.get(self._follow) == call:
            self._follow += 1
        else:
            earlier = self._seen.get((previous, call))
            if earlier is None:
                earlier = self._seen.get((call,))
            self._follow = None if earlier is None else earlier + 1
        self._calls[position] = call
        self._calls.pop(position - MAX_CALLS, None)
        self._count += 1
        for occurrence in ((call,), (previous, call)):
            self._seen.pop(occurrence, None)  # re-inserted last: most recent
            if len(self._seen) >= MAX_CALLS:
                del self._seen[next(iter(self._seen))]
                self.stats["forgotten"] += 1
            self._seen[occurrence] = position

    def _probe(self, frame: Frame, call: Call, gloo: dist.ProcessGroup) -> list[tuple[int, ...]]:
        message = frame.message(self._size)
        message.data.zero_()
        message.header.copy_(frame.headers(self._rank, self._size, call.digest)[0])
        wait_all([frame.start(gloo, message, frame.options())], self._wait(call))
        return frame.digests(message.received, self._size)

    def _exchange(self, call: Call, gloo: dist.ProcessGroup) -> None:
        """All-gather every rank's digest and sizes; raise on every rank unless they agree."""
        size = self._size
        mine = torch.zeros(DIGEST_WORDS + 2 * size, dtype=torch.int64)
        mine[:DIGEST_WORDS] = torch.tensor(call.digest)
        if call.sends:
            mine[DIGEST_WORDS:] = torch.tensor([*call.sends, *call.receives])
        everyone = torch.empty(size * mine.numel(), dtype=torch.int64)
        work = _torch.allgather_base(gloo, everyone, mine)
        wait_all([work], self._wait(call))
        self.stats["exchanged"] += 1
        rows = everyone.view(size, -1).tolist()
        digests = [tuple(row[:DIGEST_WORDS]) for row in rows]
        if any(d != call.digest for d in digests):
            raise self._mismatch(call, digests)
        if call.sends:
            sends = [row[DIGEST_WORDS : DIGEST_WORDS + size] for row in rows]
            receives = [row[DIGEST_WORDS + size :] for row in rows]
            for src in range(size):
                for dst in range(size):
                    if sends[src][dst] != receives[dst][src]:
                        self.stats["mismatched"] += 1
                        raise CollectiveError(
                            f"nkipy {call.what}: rank {src} sends {sends[src][dst]} elements to "
                            f"rank {dst}, which expects {receives[dst][src]}. The split sizes "
                            "must match between every pair of ranks (rank a's input split for b "
                            "is rank b's output split for a); nothing was exchanged."
                        )

    def _wait(self, call: Call) -> Wait:
        return Wait(call.what, self._peers, self._timeout)

    def _mismatch(self, call: Call, digests: list[tuple[int, ...]]) -> CollectiveError:
        self.stats["mismatched"] += 1
        others = [r for r, d in enumerate(digests) if d != call.digest]
        return CollectiveError(
            f"nkipy {call.what}: the ranks passed different tensors or called different "
            f"collectives (this rank, {self._rank}: {call.what} {call.signature}; ranks "
            f"{others} differ). Every rank of the group must call the same collectives in the "
            "same order with tensors of the same shape and dtype; nothing was written."
        )
