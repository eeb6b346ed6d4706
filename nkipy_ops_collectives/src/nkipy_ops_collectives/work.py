"""The works the ``nkipy`` process group returns: gloo works plus what finishes them here.

A collective on ``nkipy`` tensors is done when gloo is done *and* its results are written back
into the device tensors (and checked, divided for AVG...). That last part runs in ``wait``, on the
waiting thread, so device memory is only ever touched by the program's own threads.

``get_future`` therefore waits too: it returns a future that is already complete, holding what
torch's own works hold (the output tensors, here the device tensors after write-back).
DistributedDataParallel's reducer and its communication hooks (``allreduce_hook``,
``fp16_compress_hook``) take the future and chain ``then`` / ``value`` / ``wait`` on it; with a
complete future their callbacks run at once, in the thread that asked. The cost is that an
allreduce started by DDP's backward hook no longer overlaps the rest of the backward pass; the
runtimes here execute synchronously anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

import attrs
import torch
import torch.distributed as dist

from nkipy_core.errors import CollectiveError

from .untraced import untraced


@attrs.frozen
class Wait:
    """What a rank waits for in one operation: the collective and the group ranks it needs, and
    the group's timeout. A failure while waiting becomes a ``CollectiveError`` that names them."""

    what: str
    peers: tuple[int, ...]
    timeout: timedelta

    def failed(self, exc: BaseException) -> CollectiveError:
        """The error for a gloo operation that failed or timed out on this rank (``exc``, kept
        as the cause). Gloo reports a peer that exited or was killed at once, as a lost
        connection, and a peer that never came as a timeout: each gets its own advice."""
        gloo = str(exc)
        peers = f"rank {self.peers[0]}" if len(self.peers) == 1 else f"ranks {list(self.peers)}"
        if any(marker in gloo.lower() for marker in _LOST):
            message = (
                f"nkipy {self.what}: lost the connection to {peers} of the group while waiting "
                f"for it ({gloo}). A rank exited or was killed: its log says why. This group "
                "cannot run collectives any more: end this process (or destroy the group with "
                "destroy_process_group) and restart the job."
            )
        elif "timed out" in gloo.lower():
            message = (
                f"nkipy {self.what}: {peers} of the group did not take part within the group's "
                f"timeout ({self.timeout}, `init_process_group(timeout=...)`) ({gloo}). Check "
                "that every rank calls the same collectives in the same order and that none is "
                "hung; raise the timeout if a rank may legitimately take longer to get there."
            )
        else:
            message = (
                f"nkipy {self.what} failed on this rank while waiting for {peers}: {gloo}. Check "
                "that every rank of the group calls the same collectives in the same order with "
                "tensors of the same shape and dtype; the group gives up after its timeout "
                f"({self.timeout}, `init_process_group(timeout=...)`)."
            )
        error = CollectiveError(message)
        error.__cause__ = exc
        return error


#: how gloo's errors say that a peer's connection is gone (the peer process ended)
_LOST = ("closed by peer", "reset by peer", "broken pipe", "connection refused")


@untraced
class Work(dist.Work):
    """Waits for ``inner`` (gloo works, possibly none), then runs ``finish`` once."""

    def __init__(
        self,
        wait: Wait,
        inner: Sequence[dist.Work] = (),
        finish: Callable[[], None] = lambda: None,
        outputs: Sequence[torch.Tensor] = (),
    ):
        super().__init__()
        self._wait = wait
        self._inner, self._finish, self._outputs = list(inner), finish, list(outputs)
        self._done = False
        self._error: CollectiveError | None = None

    def wait(self, timeout: timedelta | None = None) -> bool:
        if not self._done:
            try:
                for work in self._inner:
                    if timeout:
                        work.wait(timeout)
                    else:
                        work.wait()
                # results are written as torch's backends write them, outside autograd: a
                # pipeline stage receives into a leaf that requires grad
                with torch.no_grad():
                    self._finish()
            except CollectiveError as exc:
                self._error = exc
            except RuntimeError as exc:  # gloo's DistBackendError and timeouts are RuntimeErrors
                self._error = self._wait.failed(exc)
            self._done = True
            self._inner, self._finish = [], lambda: None  # release the gloo works and buffers
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self) -> bool:
        return self._done

    def get_future(self) -> torch.futures.Future:
        """A complete future holding the output tensors (written back): see the module docstring."""
        self.wait()
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(self._outputs)
        return future

    def result(self) -> list[torch.Tensor]:
        """The output tensors, once written back (what ``get_future`` holds)."""
        self.wait()
        return self._outputs

    @property
    def outputs(self) -> list[torch.Tensor]:
        """The output tensors (written back once the work is waited on)."""
        return self._outputs


def wait_all(works: Sequence[dist.Work], wait: Wait) -> None:
    """Wait for gloo works now (the agreement steps, which must finish before anything else)."""
    try:
        for work in works:
            work.wait()
    except RuntimeError as exc:
        raise wait.failed(exc) from exc
