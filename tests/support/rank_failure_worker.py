"""One rank (started by torchrun) of a run in which rank 1 is killed (SIGKILL) at a chosen point and
rank 0, the survivor, must raise a typed error within the group's timeout instead of hanging
(``tests/collectives/test_rank_failure.py``).

Rank 1 writes ``<out>/killed.json`` (the wall-clock time) just before it kills itself. Rank 0
writes ``<out>/survivor.json`` as soon as it raises (the error's type, message and wall-clock time)
and re-raises, as a program that does not catch the error would. With ``TEARDOWN`` ``destroy`` it
first destroys the process group and records how long that took; with ``exit`` the group is left
to the interpreter's exit.

usage: rank_failure_worker.py CASE BACKEND TEARDOWN OUT_DIR
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

import nkipy_core
from nkipy_core import init_nkipy_backend
from nkipy_core.runtime.communicator import TorchDistributedCommunicator
from nkipy_core.runtime.cpu import CpuRuntime

#: the group's timeout: every wait of the survivor must end well within it
TIMEOUT = timedelta(seconds=10)
#: how long rank 1 lets the survivor get into its wait before dying
HEAD_START = 0.5
#: a bound on the worker's own polling, far above any step's duration
PATIENCE = 60.0


def die(out: Path) -> None:
    """Rank 1's end: record when, then SIGKILL (no cleanup, no exit handlers, as a crash)."""
    (out / "killed.json").write_text(json.dumps({"at": time.time()}))
    os.kill(os.getpid(), signal.SIGKILL)


def reduced(x: torch.Tensor) -> torch.Tensor:
    """A kernel that holds a collective (``_c10d_functional.all_reduce`` lowered into it)."""
    h = torch.relu(x) * 2
    dist.all_reduce(h)
    return h + 1


def eager_mid_loop(rank: int, out: Path) -> None:
    """Both ranks all-reduce ``nkipy`` tensors in a loop; rank 1 dies from another thread while
    its main thread is somewhere inside the loop."""
    x = torch.ones(1024, device="nkipy")
    dist.all_reduce(x)
    if rank == 1:
        threading.Timer(HEAD_START, die, (out,)).start()
    while True:
        dist.all_reduce(x)


def eager_never_enters(rank: int, out: Path) -> None:
    """Rank 0 enters an all_reduce that rank 1 never calls: rank 1 dies first."""
    x = torch.ones(1024, device="nkipy")
    dist.all_reduce(x)
    if rank == 1:
        time.sleep(HEAD_START)
        die(out)
    dist.all_reduce(x)


def kernel(rank: int, out: Path) -> None:
    """Both ranks run a compiled kernel with a collective inside; the second time, rank 1 dies
    inside the kernel, as its collective starts, while rank 0 waits in the same collective."""
    fn = torch.compile(reduced, backend="nkipy", fullgraph=True, dynamic=False)
    fn(torch.ones(4, 6))
    if rank == 1:
        # the kernel calls its communicator for its collective: rank 1 dies there instead
        TorchDistributedCommunicator.__call__ = lambda *args, **kwargs: die(out)
    fn(torch.ones(4, 6))


def compile_lock(rank: int, out: Path) -> None:
    """Rank 1 dies while compiling a kernel (holding its compile lock) that rank 0 waits for.

    Rank 0 starts its compile once it sees the lock held, and tells rank 1 when it waits on it
    (``cache_stats["compile_lock_waits"]``); rank 1's compile then kills it. Rank 0 gets the
    lock, compiles the kernel itself and runs it: its all_reduce waits for the dead rank."""
    marker = out / "survivor_waits"
    if rank == 1:
        # called while holding the kernel's compile lock (compiler/kernels.py)
        CpuRuntime.compile = lambda *args: _wait_then_die(marker, out)
    else:
        _wait_for_held_lock(out / "cache" / "locks")
        threading.Thread(target=_announce_lock_wait, args=(marker,), daemon=True).start()
    torch.compile(reduced, backend="nkipy", fullgraph=True, dynamic=False)(torch.ones(4, 6))


def _wait_then_die(marker: Path, out: Path) -> None:
    _poll(marker.exists, "rank 0 to wait for the compile lock")
    time.sleep(HEAD_START)
    die(out)


def _wait_for_held_lock(locks: Path) -> None:
    def held() -> bool:
        for path in locks.glob("*") if locks.exists() else ():
            with open(path, "ab") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return True
        return False

    _poll(held, "rank 1 to hold a compile lock")  # taken and let go at once when free


def _announce_lock_wait(marker: Path) -> None:
    _poll(lambda: nkipy_core.cache_stats["compile_lock_waits"] > 0, "the compile lock wait")
    marker.touch()


def _poll(ready, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.01)


CASES = {f.__name__: f for f in (eager_mid_loop, eager_never_enters, kernel, compile_lock)}


def main() -> None:
    case, backend, teardown, out = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    dist.init_process_group(backend, timeout=TIMEOUT)
    rank = dist.get_rank()
    init_nkipy_backend(runtime="cpu", nkipy_cache=str(out / "cache"))
    try:
        CASES[case](rank, out)
    except Exception as exc:
        if rank == 0:
            survived(exc, out, destroy=teardown == "destroy")
        raise
    sys.exit(f"rank {rank}: {case} finished without an error")


def survived(exc: Exception, out: Path, destroy: bool) -> None:
    """Record the survivor's error at once, then (``destroy``) how long destroying the group
    takes; else the group is left to the interpreter's exit."""
    result = {
        "raised_at": time.time(),
        "type": [c.__name__ for c in type(exc).__mro__],
        "message": str(exc),
        "cause": repr(exc.__cause__),
        "stats": dict(nkipy_core.cache_stats),
    }
    (out / "survivor.json").write_text(json.dumps(result))
    if destroy:
        start = time.monotonic()
        dist.destroy_process_group()
        result["destroy_seconds"] = time.monotonic() - start
        (out / "survivor.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
