"""Ahead-of-time compiles: what a process compiled for ``Config.precompile``, and its report.

``nkipy-ops precompile -- python train.py`` runs the script on the ``cpu`` runtime with
``NKIPY_PRECOMPILE`` naming a second runtime (``nrt``); the compiler then also compiles every
kernel for that runtime into the cache, under that runtime's keys. A kernel that fails to compile
for it is counted and logged, never raised: the script must run to the end so every later kernel
gets its chance. At exit the process writes the counts as JSON to ``$NKIPY_PRECOMPILE_REPORT``,
which the CLI reads to print its summary.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
from pathlib import Path
from typing import Any

from nkipy_core.config import env
from nkipy_core.errors import RuntimeNotFoundError, RuntimeUnavailableError
from nkipy_core.plugin import manager as plugins

log = logging.getLogger("nkipy.precompile")

#: where the process writes its report at exit (set by ``nkipy-ops precompile``)
REPORT_ENV = env.NKIPY_PRECOMPILE_REPORT.name


class Report:
    """Counts of one process (thread-safe: kernels compile in parallel)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.compiled = 0
        self.cached = 0
        self.failures: list[dict[str, str]] = []
        self.compiler_seconds = 0.0
        self._registered = False

    def record_compiled(self, seconds: float) -> None:
        with self._lock:
            self.compiled += 1
            self.compiler_seconds += seconds
            self._write_at_exit()

    def record_cached(self) -> None:
        with self._lock:
            self.cached += 1
            self._write_at_exit()

    def record_failed(self, kernel: str, error: BaseException) -> None:
        log.warning(
            "nkipy precompile: kernel %s failed to compile: %s: %s",
            kernel,
            type(error).__name__,
            error,
        )
        with self._lock:
            self.failures.append({"kernel": kernel, "error": f"{type(error).__name__}: {error}"})
            self._write_at_exit()

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "kernels": self.compiled + self.cached + len(self.failures),
                "compiled": self.compiled,
                "cached": self.cached,
                "failed": len(self.failures),
                "compiler_seconds": round(self.compiler_seconds, 3),
                "failures": list(self.failures),
            }

    def _write_at_exit(self) -> None:
        path = env.NKIPY_PRECOMPILE_REPORT.get()
        if not self._registered and path is not None:
            atexit.register(self.write, path)
            self._registered = True

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.as_dict(), indent=2))


#: the process's report (the counts are per process, like ``cache.STATS``)
REPORT = Report()


def target_runtime(name: str, strict: bool = False) -> Any:
    """The registered runtime ``name``, checked to be able to compile on this machine (its
    ``can_compile`` if it has one, else ``available``)."""
    registry = plugins.get(strict=strict).runtimes
    runtime = registry.get(name)
    if runtime is None:
        raise RuntimeNotFoundError(
            f"cannot precompile for runtime {name!r}: no such runtime is installed (installed: "
            f"{registry.names()}); install the pack that provides it (nkipy-runtime gives 'nrt')"
        )
    ok, reason = getattr(runtime, "can_compile", runtime.available)()
    if not ok:
        raise RuntimeUnavailableError(
            f"cannot precompile for runtime {name!r} on this machine: {reason}"
        )
    return runtime
