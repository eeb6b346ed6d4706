"""Run code in a fresh interpreter: what torch's device autoload does happens only at the first
``import torch`` of a process, so tests of it need a new one."""

import os
import subprocess
import sys


def python(
    code: str, *args: str, timeout: float = 300, **env: str | None
) -> subprocess.CompletedProcess:
    """``python -c code *args`` with this environment plus ``env`` (a ``None`` value removes a variable)."""
    environ = {**os.environ, **env}
    for name in [n for n, v in environ.items() if v is None]:
        del environ[name]
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
    )
