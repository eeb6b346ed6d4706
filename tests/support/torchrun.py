"""Launching real ranks with torchrun (2 processes on this host) and reading what they wrote."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

#: ranks per launch: two processes are what CI's two cores hold
RANKS = 2


def torchrun(
    *args: str,
    timeout: float = 120,
    env: dict[str, str | None] | None = None,
    ranks: int = RANKS,
) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node RANKS ARGS``, output captured; ``env`` adds to (or
    overrides) this process's environment for the ranks, a ``None`` value removes a variable."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(ranks),
        *args,
    ]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=_environment(env)
    )


def torchrun_per_rank(
    *args: str,
    logs: Path,
    timeout: float,
    env: dict[str, str | None] | None = None,
    ranks: int = RANKS,
) -> list[tuple[int, str]]:
    """One torchrun per rank (``--nnodes RANKS --nproc-per-node 1``, rendezvous on this host),
    as a job spread over hosts runs: when a rank dies only its own torchrun ends it, the other
    ranks run on. Each torchrun's exit code and output (written to ``logs/rank<N>.log``), in
    rank order. At ``timeout`` seconds every process still running is killed and the test fails,
    so a hang fails the test instead of hanging it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launches = []
    for rank in range(ranks):
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            *("--nnodes", str(ranks), "--node-rank", str(rank), "--nproc-per-node", "1"),
            *("--master-addr", "127.0.0.1", "--master-port", str(port)),
            *args,
        ]
        log = logs / f"rank{rank}.log"
        with open(log, "w") as output:  # the child keeps its own descriptor
            process = subprocess.Popen(
                command,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=_environment(env),
            )
        launches.append((process, log))
    deadline = time.monotonic() + timeout
    try:
        for process, _ in launches:
            process.wait(max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        for process, _ in launches:
            for pid in [process.pid, *_descendants(process.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            process.wait()
        outputs = "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for _, log in launches)
        pytest.fail(f"the ranks did not finish within {timeout} s (killed):\n{outputs}")
    return [(process.returncode, log.read_text()) for process, log in launches]


def _descendants(pid: int) -> list[int]:
    """The processes started by ``pid`` and by them, from ``/proc`` (torchrun starts each rank
    in a session of its own, so killing torchrun's process group would leave the ranks)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _environment(env: dict[str, str | None] | None) -> dict[str, str] | None:
    """This process's environment with ``env`` added (a ``None`` value removes a variable)."""
    if not env:
        return None
    merged = {**os.environ, **env}
    return {name: value for name, value in merged.items() if value is not None}


def rank_results(*args: str, out: Path, env: dict[str, str | None] | None = None) -> list:
    """Run a worker that writes ``<out>/rank<N>.json``; the ranks' results, or the test fails
    with torchrun's output."""
    done = torchrun(*args, env=env)
    paths = [out / f"rank{rank}.json" for rank in range(RANKS)]
    if not all(path.exists() for path in paths):
        pytest.fail(
            f"torchrun exited {done.returncode} without results:\n{done.stdout}\n{done.stderr}"
        )
    return [json.loads(path.read_text()) for path in paths]
