"""The on-disk kernel cache.

Layout under the cache root::

    kernels/<kernel key>/   meta.json, graph.py, kernel.py, kernel.ir, artifacts/<runtime files>
    index/<fx key>          the kernel key (or a partition plan) a lowering input maps to
    locks/<kernel key>      empty files, the compile lock of each kernel ever compiled here
    stats/                  the last run's per-kernel counters (written by ``profiling``)

The kernel key hashes the IR text, runtime, compiler arguments and package versions, so two
graphs that lower to the same IR share one compiled artifact (every key's recipe is in ``keys``). The index maps the *input* of
lowering (FX code and input types) to results, so a process with a warm cache does not lower.

Every entry is written to a private temporary directory and renamed into place, which is atomic
on POSIX: concurrent processes (ranks) either see a complete entry or none. ``meta.json``
records a SHA-256 of every file; an entry whose files are missing or altered is logged, moved
aside and rebuilt.

Ranks that share a cache compile each kernel once. A miss is compiled and stored while holding
an exclusive ``flock`` on ``locks/<kernel key>``; a rank that misses the same key meanwhile
waits for that lock, then finds the entry and loads it (``STATS["waited_for_other_process"]``)
instead of compiling it again. Hits take no lock, so a warm cache costs nothing extra. The OS
releases a ``flock`` when its holder exits or is killed, so a crashed rank never leaves a stale
lock behind; the lock files are kept (unlinking a lock file others may hold would let two ranks
lock different files for one key). Only a *live* holder can make a rank wait long: after
``NKIPY_CACHE_LOCK_TIMEOUT`` seconds (default one hour, more than any compile should take) the
waiter raises ``CacheLockTimeoutError`` instead of hanging.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nkipy_core.config import env
from nkipy_core.errors import CacheError, CacheLockTimeoutError

log = logging.getLogger("nkipy.cache")

#: process-wide counters (hits, misses, corrupt entries, kernels lowered and compiled, nodes
#: planned, kernels another process compiled while this one waited for the lock, compile locks
#: found held by another process): how tests and users observe that a warm cache skipped
#: lowering and that ranks compiled each kernel once
STATS: collections.Counter[str] = collections.Counter()

_LOCK_POLL_SECONDS = 0.05


class KernelCache:
    """One cache root. Instances are cheap; the counters live in ``STATS``."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser().resolve()
        try:
            for sub in ("kernels", "index", "locks", "tmp"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            probe = tempfile.NamedTemporaryFile(dir=self.root / "tmp", delete=True)
            probe.close()
        except OSError as exc:
            raise CacheError(
                f"the nkipy kernel cache directory {self.root} is not writable ({exc.strerror}). "
                "Pass a writable directory as init_nkipy_backend(nkipy_cache=...) or "
                "torch.compile(..., options={'nkipy_cache': ...})."
            ) from None

    # -- index --------------------------------------------------------------------------------

    def get_index(self, key: str) -> dict[str, Any] | None:
        path = self.root / "index" / key
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("nkipy cache: index entry %s is unreadable (%s); rebuilding it", path, exc)
            STATS["corrupt"] += 1
            path.unlink(missing_ok=True)
            return None

    def put_index(self, key: str, value: dict[str, Any]) -> None:
        atomic_write(
            self.root / "index" / key, json.dumps(value, sort_keys=True).encode(), self.root / "tmp"
        )

    # -- kernel entries -----------------------------------------------------------------------

    def entry_dir(self, key: str) -> Path:
        return self.root / "kernels" / key

    def load(
        self, key: str, count_miss: bool = True
    ) -> tuple[dict[str, Any], dict[str, bytes]] | None:
        """(meta, artifacts) of a complete, intact entry; ``None`` (and the entry moved aside) otherwise.

        ``count_miss=False`` for the second look after waiting for the compile lock: the miss
        that made the caller wait is already counted."""
        entry = self.entry_dir(key)
        if not entry.exists():
            if count_miss:
                STATS["misses"] += 1
                log.debug("nkipy cache: miss for kernel %s in %s", key, self.root)
            return None
        try:
            meta = json.loads((entry / "meta.json").read_text())
            for name, expected in meta["files"].items():
                if hashlib.sha256((entry / name).read_bytes()).hexdigest() != expected:
                    raise ValueError(f"{name} does not match its checksum")
            artifacts = {
                name.removeprefix("artifacts/"): (entry / name).read_bytes()
                for name in meta["files"]
                if name.startswith("artifacts/")
            }
        except (OSError, ValueError, KeyError) as exc:
            log.warning(
                "nkipy cache: entry %s is corrupt or partial (%s); rebuilding it", entry, exc
            )
            STATS["corrupt"] += 1
            self._discard(entry)
            return None
        STATS["hits"] += 1
        log.debug(
            "nkipy cache: hit for kernel %s (%s, %s)", key, meta.get("name"), meta.get("runtime")
        )
        return meta, artifacts

    @contextlib.contextmanager
    def compile_lock(self, key: str) -> Iterator[None]:
        """Hold the exclusive compile lock of kernel ``key`` (see the module docstring).

        Each call opens the lock file anew, so threads of one process exclude each other too
        (``flock`` locks belong to an open file, not to a process)."""
        path = self.root / "locks" / key
        timeout = env.NKIPY_CACHE_LOCK_TIMEOUT.get()
        with open(path, "ab") as lock:  # created if absent, never truncated
            deadline = time.monotonic() + timeout
            waiting = False
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not waiting:
                        waiting = True
                        STATS["compile_lock_waits"] += 1
                        log.info(
                            "nkipy cache: waiting up to %g s for another process compiling "
                            "kernel %s (it holds %s)",
                            timeout,
                            key,
                            path,
                        )
                    if time.monotonic() >= deadline:
                        raise CacheLockTimeoutError(
                            f"waited {timeout:g} s for another process to compile kernel {key} "
                            f"(it holds {path}). A process that dies releases the lock, so the "
                            "holder is still running: check it is not hung, or let the wait last "
                            f"longer by setting {env.NKIPY_CACHE_LOCK_TIMEOUT.name} (seconds)."
                        ) from None
                    time.sleep(_LOCK_POLL_SECONDS)
            yield  # closing the file releases the lock

    def store(
        self,
        key: str,
        files: Mapping[str, bytes],
        artifacts: Mapping[str, bytes],
        meta: dict[str, Any],
    ) -> Path:
        """Write an entry atomically; if another process got there first, keep theirs (a writer
        that bypassed the compile lock, e.g. an older nkipy)."""
        final = self.entry_dir(key)
        staging = Path(tempfile.mkdtemp(prefix=f"{key[:16]}-", dir=self.root / "tmp"))
        try:
            everything = {**files, **{f"artifacts/{n}": b for n, b in artifacts.items()}}
            for name, data in everything.items():
                (staging / name).parent.mkdir(parents=True, exist_ok=True)
                (staging / name).write_bytes(data)
            meta = {
                **meta,
                "files": {n: hashlib.sha256(b).hexdigest() for n, b in everything.items()},
            }
            (staging / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
            try:
                os.rename(staging, final)
            except OSError:
                if not final.exists():
                    raise
                log.debug("nkipy cache: %s was written concurrently; keeping the first entry", key)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return final

    # -- helpers ------------------------------------------------------------------------------

    def _discard(self, entry: Path) -> None:
        """Move a bad entry out of the way (rename is atomic; a reader never sees half of it)."""
        graveyard = self.root / "tmp" / f"corrupt-{uuid.uuid4().hex}"
        try:
            os.rename(entry, graveyard)
        except OSError:
            return
        shutil.rmtree(graveyard, ignore_errors=True)


def atomic_write(path: Path, data: bytes, staging: Path) -> None:
    """Write ``data`` to ``path`` through a temporary file in ``staging`` (on the same file
    system) and a rename, so readers see the old file or the new one, whole, never a part."""
    fd, tmp = tempfile.mkstemp(dir=staging, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
