"""Launching real ranks with torchrun (2 processes on this host) and reading what they wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
    environment = None
    if env:
        merged = {**os.environ, **env}
        environment = {name: value for name, value in merged.items() if value is not None}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment)


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
