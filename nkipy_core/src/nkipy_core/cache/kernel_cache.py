"""The on-disk kernel cache.

Layout under the cache root::

    kernels/<kernel key>/   meta.json, seal.json, graph.py, kernel.py, kernel.ir,
                            artifacts/<runtime files>
    index/<fx key>          the kernel key (or a partition plan) a lowering input maps to, sealed
    locks/<kernel key>      empty files, the compile lock of each kernel ever compiled here
    stats/                  the last run's per-kernel counters (written by ``profiling``)

The kernel key hashes the IR text, runtime, compiler arguments and package versions, so two
graphs that lower to the same IR share one compiled artifact (every key's recipe is in ``keys``). The index maps the *input* of
lowering (FX code and input types) to results, so a process with a warm cache does not lower.

Every entry is written to a private temporary directory and renamed into place, which is atomic
on POSIX: concurrent processes (ranks) either see a complete entry or none. ``meta.json``
records a SHA-256 of every file; an entry whose files are missing or altered is logged, moved
aside and rebuilt.

Nothing read from a cache is used unless something an attacker with write access to the cache
cannot forge vouches for it (``trust``): this user's seal in ``seal.json`` (and in each index
file), a trusted signature or a pinned digest. An entry nothing vouches for is counted in
``STATS["untrusted"]``, warned about once per root, moved aside and compiled again. The root and
its layout must be private to this user (``safety``: ``UnsafeCacheError`` otherwise), and
everything nkipy creates in it is. Read-only *shared tiers* (``NKIPY_CACHE_SHARED``, a directory
a build machine fills) are looked up after the local root; their entries count only when signed
by a trusted key or pinned, and are never changed. ``NKIPY_CACHE_MAX_SIZE`` bounds the local
root: after each store, the least recently used entries (a hit refreshes an entry's time) are
removed until the rest fit.

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

Only a root that cannot be created or read at all raises ``CacheError``, and one that is not
private to this user ``UnsafeCacheError``.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import hashlib
import hmac
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from nkipy_core.cache.safety import PRIVATE_DIR, check_private, make_private_dirs, open_private
from nkipy_core.cache.trust import SEAL_FILE, CacheTrustWarning, make_seal, seal, verdict
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
        """Create the layout (private to this user) and probe for writing; whether the root is
        writable. A root others could write, or that another user owns, is refused
        (``safety.check_private``). A root that can be read but not written is used read-only
        (warned once)."""
        try:
            make_private_dirs(self.root)
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
        check_private(self.root)
        try:
            for sub in _LAYOUT:
                path = self.root / sub
                if not path.is_dir():
                    make_private_dirs(path)
                check_private(path)
            tempfile.NamedTemporaryFile(prefix=".probe-", dir=self.root / "tmp").close()
        except OSError as exc:
            for sub in _LAYOUT:  # what exists of the layout must be private all the same
                if (self.root / sub).exists():
                    check_private(self.root / sub)
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
        """Index entry ``key``, if present and sealed by this user (an index file decides which
        kernel a graph runs, so it is trusted like an entry)."""
        path = self.root / "index" / key
        try:
            stored = json.loads(path.read_text())
            value = stored["value"]
            if not hmac.compare_digest(str(stored["mac"]), _index_seal(key, value)):
                raise Untrusted(f"index entry {key}")
            return value
        except FileNotFoundError:
            return None
        except Untrusted:
            self._untrusted(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
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
        stored = {"value": value, "mac": _index_seal(key, value)}
        try:
            atomic_write(
                self.root / "index" / key,
                json.dumps(stored, sort_keys=True).encode(),
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
        """(meta, artifacts) of a complete, intact, trusted entry, from this root or else from a
        shared tier; ``None`` otherwise (a bad entry of this root is moved aside, see the module
        docstring).

        ``count_miss=False`` for the second look after waiting for the compile lock: the miss
        that made the caller wait is already counted."""
        entry = self.entry_dir(key)
        found = None
        if entry.exists():
            try:
                found = read_entry(entry, sealed_ok=True)
            except Untrusted:
                self._untrusted(entry)
                self._discard(entry)
            except (OSError, ValueError, KeyError) as exc:
                log.warning(
                    "nkipy cache: entry %s is corrupt or partial (%s); rebuilding it", entry, exc
                )
                STATS["corrupt"] += 1
                self._discard(entry)
            if found is not None:
                with contextlib.suppress(OSError):  # a read-only root keeps its times
                    os.utime(entry)  # its last use, for the size limit's LRU order
        if found is None:
            found = self._load_shared(key)
        if found is None:
            if count_miss:
                STATS["misses"] += 1
                log.debug("nkipy cache: miss for kernel %s in %s", key, self.root)
            return None
        meta, artifacts, why = found
        STATS["hits"] += 1
        log.debug(
            "nkipy cache: hit for kernel %s (%s, %s; %s)",
            key,
            meta.get("name"),
            meta.get("runtime"),
            why,
        )
        return meta, artifacts

    def _load_shared(self, key: str) -> tuple[dict[str, Any], dict[str, bytes], str] | None:
        """The entry ``key`` of the first shared tier that holds it intact and signed or pinned;
        shared tiers are never changed (their bad entries are counted and skipped)."""
        for tier in shared_tiers():
            entry = tier / "kernels" / key
            if not entry.is_dir():
                continue
            try:
                found = read_entry(entry, sealed_ok=False)
            except Untrusted:
                self._untrusted(entry)
                continue
            except (OSError, ValueError, KeyError) as exc:
                log.warning("nkipy cache: shared entry %s is corrupt (%s); skipped", entry, exc)
                STATS["corrupt"] += 1
                continue
            STATS["shared_hits"] += 1
            return found
        return None

    def _untrusted(self, path: Path) -> None:
        """Count an entry nothing vouches for and warn once per root (``trust``)."""
        STATS["untrusted"] += 1
        log.info("nkipy cache: %s is not sealed, signed by a trusted key or pinned", path)
        if _first_time("untrusted", self.root):
            warnings.warn(
                f"nkipy: kernel cache entries such as {path} are not sealed by your key, signed by "
                "a key you trust or pinned (written by another user or host, by an older nkipy, or "
                "changed since): they are not used, and their kernels are compiled again. To share "
                "kernels between users or hosts, sign them (NKIPY_CACHE_SIGNING_KEY, `nkipy-ops "
                "cache export`) and list the key in NKIPY_CACHE_TRUSTED_KEYS where they are used.",
                CacheTrustWarning,
                stacklevel=3,
            )

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
            lock = os.fdopen(open_private(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab")
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
        """Stage the entry in ``tmp/`` and rename it into place (``install``)."""
        everything = {**files, **{f"artifacts/{n}": b for n, b in artifacts.items()}}
        meta = {
            **meta,
            "key": key,
            "files": {n: hashlib.sha256(b).hexdigest() for n, b in everything.items()},
        }
        meta_bytes = json.dumps(meta, indent=2, sort_keys=True).encode()
        return self.install(key, everything, meta_bytes, make_seal(meta_bytes))

    def install(
        self, key: str, files: Mapping[str, bytes], meta: bytes, seal_content: dict[str, Any]
    ) -> Path:
        """Write entry ``key`` (its files, ``meta.json`` bytes and ``seal.json`` content) into
        ``tmp/`` and rename it into place; if another process got there first, keep theirs (a
        writer that bypassed the compile lock, e.g. an older nkipy). ``OSError`` when it cannot
        be written; the entry is then absent, and so is anything of it."""
        final = self.entry_dir(key)
        staging = Path(tempfile.mkdtemp(prefix=f"{key[:16]}-", dir=self.root / "tmp"))
        try:
            for name, data in files.items():
                (staging / name).parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
                _write_private(staging / name, data)
            _write_private(staging / "meta.json", meta)
            _write_private(staging / SEAL_FILE, json.dumps(seal_content).encode())
            try:
                os.rename(staging, final)
            except OSError:
                if not final.exists():
                    raise
                log.debug("nkipy cache: %s was written concurrently; keeping the first entry", key)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        limit = env.NKIPY_CACHE_MAX_SIZE.get()
        if limit is not None:
            self.prune(max_bytes=limit, keep=key)
        return final

    # -- maintenance (``nkipy-ops cache``) ----------------------------------------------------

    def remove(self, key: str) -> None:
        """Remove entry ``key`` (atomically: a reader sees it whole or not at all)."""
        self._discard(self.entry_dir(key))

    def entries(self) -> list[EntryInfo]:
        """Every kernel entry of this root, least recently used first."""
        found = []
        for entry in _listing(self.root / "kernels"):
            try:
                size = sum(
                    os.lstat(os.path.join(parent, name)).st_size
                    for parent, _, names in os.walk(entry)
                    for name in names
                )
                found.append(EntryInfo(entry.name, entry, size, entry.stat().st_mtime))
            except OSError:  # removed meanwhile
                continue
        return sorted(found, key=lambda e: e.last_used)

    def prune(
        self,
        max_bytes: int | None = None,
        older_than: float | None = None,
        keep: str | None = None,
    ) -> list[EntryInfo]:
        """Remove entries unused for ``older_than`` seconds, then the least recently used ones
        until the rest hold at most ``max_bytes``; never ``keep``. The entries removed."""
        entries = self.entries()
        total = sum(e.size for e in entries)
        now = time.time()
        removed = []
        for info in entries:
            stale = older_than is not None and now - info.last_used > older_than
            too_big = max_bytes is not None and total > max_bytes
            if info.key == keep or not (stale or too_big):
                continue
            self._discard(info.path)
            total -= info.size
            removed.append(info)
        if removed:
            STATS["evicted"] += len(removed)
            log.info(
                "nkipy cache: removed %d least recently used entr%s from %s (%d bytes left)",
                len(removed),
                "y" if len(removed) == 1 else "ies",
                self.root,
                total,
            )
        return removed

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
    fd, tmp = tempfile.mkstemp(dir=staging, prefix=f".{path.name}-")  # created 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_LAYOUT = ("kernels", "index", "locks", "tmp")


class Untrusted(Exception):
    """An entry or index file nothing vouches for (see ``trust``), or one vouched for under
    another key than its name; the message says which."""


@attrs.frozen
class EntryInfo:
    """A kernel entry as ``nkipy-ops cache`` lists it."""

    key: str
    path: Path
    size: int
    last_used: float


def shared_tiers() -> list[Path]:
    """The read-only tiers named by ``NKIPY_CACHE_SHARED``, in order."""
    text = env.NKIPY_CACHE_SHARED.get() or ""
    return [Path(p).expanduser() for p in text.split(os.pathsep) if p.strip()]


def read_entry(entry: Path, sealed_ok: bool) -> tuple[dict[str, Any], dict[str, bytes], str]:
    """(meta, artifacts, why it is trusted) of an entry directory: ``Untrusted`` when nothing
    vouches for its ``meta.json`` (``sealed_ok``: whether this user's seal counts, see
    ``trust.verdict``), ``ValueError`` when a file does not match its checksum, ``OSError`` or
    ``KeyError`` when one is missing. Trust is checked first: the checksums of an entry no one
    vouches for mean nothing."""
    meta_bytes = (entry / "meta.json").read_bytes()
    try:
        seal_text = (entry / SEAL_FILE).read_bytes()
    except FileNotFoundError:
        seal_text = None
    meta, why = vouched_meta(entry.name, meta_bytes, seal_text, sealed_ok)
    contents = checked_files(meta, lambda name: (entry / name).read_bytes())
    artifacts = {
        name.removeprefix("artifacts/"): data
        for name, data in contents.items()
        if name.startswith("artifacts/")
    }
    return meta, artifacts, why


def vouched_meta(
    key: str, meta_bytes: bytes, seal_text: bytes | None, sealed_ok: bool
) -> tuple[dict[str, Any], str]:
    """(meta, why it is trusted) of entry ``key``; ``Untrusted``, saying why, when nothing
    vouches for its ``meta.json`` (``sealed_ok`` as in ``trust.verdict``) or it was vouched for
    as another kernel."""
    why = verdict(meta_bytes, seal_text, sealed_ok)
    if why is None:
        raise Untrusted(
            "not sealed by your key, signed by a trusted key or pinned"
            if sealed_ok
            else "not signed by a trusted key (NKIPY_CACHE_TRUSTED_KEYS) nor pinned"
        )
    meta = json.loads(meta_bytes)
    if meta.get("key") != key:
        raise Untrusted("its metadata names another key")
    return meta, why


def checked_files(meta: dict[str, Any], read: Callable[[str], bytes]) -> dict[str, bytes]:
    """The bytes of every file ``meta`` lists, each read once with ``read``; ``ValueError`` when
    one does not match its checksum."""
    contents = {}
    for name, expected in meta["files"].items():
        contents[name] = read(name)
        if hashlib.sha256(contents[name]).hexdigest() != expected:
            raise ValueError(f"{name} does not match its checksum")
    return contents


def _index_seal(key: str, value: Any) -> str:
    return seal(b"index\0" + key.encode() + b"\0" + json.dumps(value, sort_keys=True).encode())


def _write_private(path: Path, data: bytes) -> None:
    with os.fdopen(open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as f:
        f.write(data)
