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

A process killed at any point (``SIGKILL``, a crashed node) leaves complete entries or none: what
it was writing stays in ``tmp/``, which a later process opening the cache sweeps (entries older
than ``STALE_STAGING_SECONDS``; see ``_sweep_stale_staging`` for why age, not owner, decides).
The cache only ever speeds compiles up, so it never makes one fail once it is open:

- a write that fails (full disk, ``RLIMIT_FSIZE``, quota, I/O error) leaves no entry; the kernel
  is used without being cached, with one ``CacheWarning`` per process and root and
  ``STATS["store_failed"]`` per write;
- a root this process cannot write (read-only mount, files of another user, ``chmod -R a-w``)
  is used read-only, with one ``CacheWarning`` per process and root: its entries are served,
  misses are compiled without being stored (``STATS["read_only_skips"]``) and no compile lock
  is taken (there is no lock file to take).

Only a root that cannot be created or read at all raises ``CacheError``.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nkipy_core.config import env
from nkipy_core.errors import CacheError, CacheLockTimeoutError

log = logging.getLogger("nkipy.cache")

#: process-wide counters (hits, misses, corrupt entries, kernels lowered and compiled, nodes
#: planned, kernels another process compiled while this one waited for the lock, compile locks
#: found held by another process, writes that failed or that a read-only cache skipped, dead
#: writers' leftovers swept): how tests and users observe that a warm cache skipped lowering,
#: that ranks compiled each kernel once, and when the cache left its normal path
STATS: collections.Counter[str] = collections.Counter()

_LOCK_POLL_SECONDS = 0.05

#: age (seconds since the last change) past which an entry of ``tmp/`` is a dead writer's
STALE_STAGING_SECONDS = 15 * 60

#: (what, root) pairs done once per process: the ``tmp/`` sweep and each kind of warning; one
#: element per cache root and kind, so it stays as small as the number of roots a process uses
_DONE_ONCE: set[tuple[str, Path]] = set()
_DONE_ONCE_LOCK = threading.Lock()


class CacheWarning(UserWarning):
    """The kernel cache cannot store kernels (read-only, full disk): compiles still work, but
    what they compile is not cached for the next process. Given once per process and cache root."""


def _first_time(what: str, root: Path) -> bool:
    """Whether this process has not yet done ``what`` for ``root`` (and now counts it done)."""
    with _DONE_ONCE_LOCK:
        if (what, root) in _DONE_ONCE:
            return False
        _DONE_ONCE.add((what, root))
        return True


def _describe(exc: OSError) -> str:
    """``EFBIG: File too large: /path``: the OS error a user can search for, and where."""
    code = errno.errorcode.get(exc.errno, str(exc.errno)) if exc.errno else type(exc).__name__
    where = f": {exc.filename}" if exc.filename else ""
    return f"{code}: {exc.strerror or exc}{where}"


class KernelCache:
    """One cache root. Instances are cheap; the counters live in ``STATS``."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser().resolve()
        self.writable = self._open()
        if self.writable and _first_time("sweep", self.root):
            self._sweep_stale_staging()

    def _open(self) -> bool:
        """Create the layout and probe for writing; whether the root is writable.

        A root that exists and can be read but not written is used read-only (warned once)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if not self.root.is_dir():
                raise CacheError(
                    f"the nkipy kernel cache directory {self.root} cannot be created "
                    f"({_describe(exc)}). {_CHOOSE_ANOTHER}"
                ) from None
        try:
            os.listdir(self.root)
        except OSError as exc:
            raise CacheError(
                f"the nkipy kernel cache directory {self.root} cannot be read ({_describe(exc)}). "
                f"{_CHOOSE_ANOTHER}"
            ) from None
        try:
            for sub in ("kernels", "index", "locks", "tmp"):
                (self.root / sub).mkdir(exist_ok=True)
            tempfile.NamedTemporaryFile(prefix=".probe-", dir=self.root / "tmp").close()
        except OSError as exc:
            if _first_time("read-only", self.root):
                warnings.warn(
                    f"nkipy: the kernel cache {self.root} is used read-only, as this process "
                    f"cannot write it ({_describe(exc)}): kernels cached there are used, others "
                    "are compiled without being stored. To cache them, make it writable or pass "
                    "another directory as init_nkipy_backend(nkipy_cache=...) or NKIPY_CACHE.",
                    CacheWarning,
                    stacklevel=2,
                )
            return False
        return True

    def _sweep_stale_staging(self) -> None:
        """Remove what writers killed mid-write left in ``tmp/`` (staging directories, temporary
        index files, entries being discarded): once per process and root, at first use.

        Age decides, not the writer's pid: pids mean nothing across the hosts and containers that
        share a cache, and a live writer's staging is seconds old (an entry is staged after its
        compile, only while its bytes are written), so nothing younger than
        ``STALE_STAGING_SECONDS`` is touched. Even a writer paused past that (stopped, suspended)
        cannot install a bad entry: its rename fails, or the entry misses files and fails its
        checksums on load, and is rebuilt."""
        now = time.time()
        removed = 0
        for path in _listing(self.root / "tmp"):
            try:
                if now - _newest_change(path) < STALE_STAGING_SECONDS:
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except OSError:  # removed by another process meanwhile, or not ours to remove
                continue
            removed += 1
        if removed:
            STATS["stale_staging_removed"] += removed
            log.info(
                "nkipy cache: removed %d leftover(s) of writers that died from %s",
                removed,
                self.root / "tmp",
            )

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
            with contextlib.suppress(OSError):  # read-only: it is rebuilt in memory each time
                path.unlink(missing_ok=True)
            return None

    def put_index(self, key: str, value: dict[str, Any]) -> None:
        """Write index entry ``key``, unless the cache cannot take it (see ``store``)."""
        if not self.writable:
            STATS["read_only_skips"] += 1
            return
        try:
            atomic_write(
                self.root / "index" / key,
                json.dumps(value, sort_keys=True).encode(),
                self.root / "tmp",
            )
        except OSError as exc:
            self._write_failed(f"index entry {key}", exc)

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
        (``flock`` locks belong to an open file, not to a process). A read-only cache takes no
        lock: nothing is stored, so there is nothing to compile once for the others; nor does a
        cache whose lock file cannot be created (full disk), which is warned and counted."""
        if not self.writable:
            yield
            return
        path = self.root / "locks" / key
        timeout = env.NKIPY_CACHE_LOCK_TIMEOUT.get()
        try:
            lock = open(path, "ab")  # created if absent, never truncated
        except OSError as exc:
            self._write_failed(f"the compile lock of kernel {key}", exc)
            yield
            return
        with lock:
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
    ) -> Path | None:
        """Write an entry atomically; its directory, or ``None`` when the cache cannot take it
        (read-only, or a write failed: nothing of it is left, see the module docstring)."""
        if not self.writable:
            STATS["read_only_skips"] += 1
            return None
        try:
            return self._write_entry(key, files, artifacts, meta)
        except OSError as exc:
            self._write_failed(f"kernel {key}", exc)
            return None

    def _write_entry(
        self,
        key: str,
        files: Mapping[str, bytes],
        artifacts: Mapping[str, bytes],
        meta: dict[str, Any],
    ) -> Path:
        """Stage the entry in ``tmp/`` and rename it into place; if another process got there
        first, keep theirs (a writer that bypassed the compile lock, e.g. an older nkipy)."""
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

    def _write_failed(self, what: str, exc: OSError) -> None:
        """Count a failed write (its partial files are already removed) and warn once."""
        STATS["store_failed"] += 1
        log.info("nkipy cache: could not write %s into %s (%s)", what, self.root, _describe(exc))
        if _first_time("write-failed", self.root):
            warnings.warn(
                f"nkipy: could not write {what} into the kernel cache {self.root} "
                f"({_describe(exc)}); kernels that cannot be stored are compiled and used without "
                "being cached. Free space on that file system (or raise the file size or quota "
                "limit), or pass another directory as init_nkipy_backend(nkipy_cache=...) or "
                "NKIPY_CACHE.",
                CacheWarning,
                stacklevel=2,
            )

    def _discard(self, entry: Path) -> None:
        """Move a bad entry out of the way (rename is atomic; a reader never sees half of it)."""
        graveyard = self.root / "tmp" / f"corrupt-{uuid.uuid4().hex}"
        try:
            os.rename(entry, graveyard)
        except OSError:
            return
        shutil.rmtree(graveyard, ignore_errors=True)


_CHOOSE_ANOTHER = (
    "Pass a directory this process can create or read as init_nkipy_backend(nkipy_cache=...), "
    "torch.compile(..., options={'nkipy_cache': ...}) or NKIPY_CACHE."
)


def _listing(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError:
        return []


def _newest_change(path: Path) -> float:
    """The newest modification time of ``path`` and, for a directory, of anything beneath it."""
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for parent, dirs, names in os.walk(path):
            for name in dirs + names:
                with contextlib.suppress(OSError):
                    newest = max(newest, os.lstat(os.path.join(parent, name)).st_mtime)
    return newest


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
