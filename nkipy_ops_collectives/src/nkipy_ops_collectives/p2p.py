"""Point-to-point for the ``nkipy`` group: send/recv with a header, so a wrong size is an error.

Gloo aborts the receiving process when a message is larger than the buffer it lands in, and
silently fills part of a larger buffer with a smaller one. So every send is two gloo messages:
a fixed-size header (a digest of dtype and shape, and the byte count) on one tag, then the data
on another. A receive posts its header buffer at once and its data buffer only when the header
has arrived: of the expected size if the header matches, else of the announced size (the data
is drained so that the pair's channel stays in step), and then its ``wait`` raises
``CollectiveError``. The sender cannot know; its send completes as usual.

Gloo completes a send only when the receiver has posted a matching buffer, and the ranks of a
``batch_isend_irecv`` wait for their works in any order. Data buffers must therefore be posted
without anyone waiting on the receive: each peer this rank receives from has a thread of its own
that waits for that peer's headers, in the order the receives were made, and posts each data
buffer (gloo matches messages per peer and tag in order). The thread touches only gloo and host
memory; results reach ``nkipy`` tensors in ``wait``, on the waiting thread. It ends when no
receive from its peer is pending, and the group's ``shutdown`` joins it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from datetime import timedelta

import torch
import torch.distributed as dist

from nkipy_core.errors import CollectiveError

from .staging import Staging
from .work import Wait, Work

#: gloo tags are 32-bit; a user's tag t travels as data tag 2t and header tag 2t + 1
MAX_TAG = (1 << 30) - 1


def _tags(tag: int) -> tuple[int, int]:
    if not 0 <= tag <= MAX_TAG:
        raise CollectiveError(
            f"nkipy send/recv tag {tag} is out of range: use a tag from 0 to {MAX_TAG}."
        )
    return 2 * tag, 2 * tag + 1


def _header(t: torch.Tensor) -> torch.Tensor:
    """What a receiver checks: a digest of the tensor's dtype and shape, and its byte count."""
    digest = hashlib.blake2b(repr((t.dtype, tuple(t.shape))).encode(), digest_size=7).digest()
    return torch.tensor([int.from_bytes(digest, "little"), t.nbytes], dtype=torch.int64)


def _bytes(host: torch.Tensor) -> torch.Tensor:
    return host.reshape(-1).view(torch.uint8)


class _Receive:
    """One receive: the header posted now, the data posted by its peer's thread."""

    def __init__(self, gloo, src: int, tags: tuple[int, int], expected: torch.Tensor, host):
        self.gloo, self.src, (self.data_tag, header_tag) = gloo, src, tags
        self.expected, self.host = expected, host
        self.header = torch.empty(2, dtype=torch.int64)
        self.header_work = gloo.recv([self.header], src, header_tag)
        self.data_work: dist.Work | None = None
        self.error: BaseException | None = None
        self.mismatch = False
        self.posted = threading.Event()

    def post_data(self) -> None:
        """Wait for the header and post the data buffer (on the peer's thread)."""
        try:
            self.header_work.wait()
            self.mismatch = not torch.equal(self.header, self.expected)
            buffer = _bytes(self.host)
            if self.mismatch:  # drain what the sender sends
                buffer = torch.empty(int(self.header[1]), dtype=torch.uint8)
            self.data_work = self.gloo.recv([buffer], self.src, self.data_tag)
        except RuntimeError as exc:
            self.error = exc
        finally:
            self.gloo = None
            self.posted.set()


class _Peer:
    """The receives pending from one peer, and the thread that posts their data buffers."""

    def __init__(self) -> None:
        self.pending: deque[_Receive] = deque()
        self.thread: threading.Thread | None = None


class PointToPoint:
    """The sends and receives of one group (its gloo group is passed in: the group keeps the
    only lasting reference, see ``NkipyProcessGroup.shutdown``)."""

    def __init__(self, timeout: timedelta):
        self._timeout = timeout
        self._peers: dict[int, _Peer] = {}
        self._lock = threading.Lock()

    def isend(self, gloo, t: torch.Tensor, dst: int, tag: int) -> Work:
        data_tag, header_tag = _tags(tag)
        host = Staging.read(t)
        wait = Wait("send", (dst,), self._timeout)
        try:  # gloo sends at once: a lost peer raises here, not in ``wait``
            works = [
                gloo.send([_header(t)], dst, header_tag),
                gloo.send([_bytes(host)], dst, data_tag),
            ]
        except RuntimeError as exc:
            raise wait.failed(exc) from exc
        return Work(wait, works, outputs=[t])

    def irecv(self, gloo, t: torch.Tensor, src: int, tag: int) -> Work:
        tags = _tags(tag)
        direct = t.device.type == "cpu" and t.is_contiguous()
        host = t if direct else torch.empty(t.shape, dtype=t.dtype)
        wait = Wait("recv", (src,), self._timeout)
        try:  # the header's receive is posted at once: a lost peer raises here
            receive = _Receive(gloo, src, tags, _header(t), host)
        except RuntimeError as exc:
            raise wait.failed(exc) from exc
        with self._lock:
            peer = self._peers.setdefault(src, _Peer())
            peer.pending.append(receive)
            if peer.thread is None:
                # not a daemon: at exit Python waits for it (bounded by the group's timeout)
                # rather than leave it inside gloo while the process tears gloo down
                peer.thread = threading.Thread(
                    target=self._post, args=(peer,), name=f"nkipy-recv-{src}"
                )
                peer.thread.start()

        def finish() -> None:
            if not receive.posted.wait(self._timeout.total_seconds()):
                raise CollectiveError(
                    f"nkipy recv from rank {src}: nothing arrived within the group's timeout "
                    f"({self._timeout}); check that rank {src} sends to this rank with tag {tag}."
                )
            if receive.error is not None:
                raise wait.failed(receive.error)
            assert receive.data_work is not None
            receive.data_work.wait()
            if receive.mismatch:
                raise CollectiveError(
                    f"nkipy recv from rank {src}: the sender's tensor differs in shape or dtype "
                    f"from this rank's {t.dtype} {tuple(t.shape)} (it sent "
                    f"{int(receive.header[1])} bytes). Send and receive tensors of the same shape "
                    "and dtype; nothing was written."
                )
            if host is not t:
                t.copy_(host)

        return Work(wait, (), finish, outputs=[t])

    def _post(self, peer: _Peer) -> None:
        while True:
            with self._lock:
                if not peer.pending:
                    peer.thread = None
                    return
                receive = peer.pending.popleft()
            receive.post_data()

    def close(self) -> None:
        """Join the peers' threads (each ends once its pending receives are posted)."""
        with self._lock:
            threads = [p.thread for p in self._peers.values() if p.thread is not None]
        for thread in threads:
            thread.join(self._timeout.total_seconds())
        self._peers.clear()
