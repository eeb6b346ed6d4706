"""Where kernel time goes: per-kernel counters, ``torch.profiler`` events, the last run's record.

Every kernel call (compiled graphs and eager ops on the ``nkipy`` device alike: both run a
``KernelCall``) counts into the ``KernelRecord`` of its kernel key, bound once when the call is
built. The counters are always on, so they must cost next to nothing per call: two
``perf_counter_ns`` readings and integer adds; the bytes a call moves in and out are fixed by
the kernel's signature, so they are computed once and multiplied by the call count when read.

While a ``torch.profiler`` (or ``torch.autograd.profiler``) session records, each call is also
a named profiler event, ``nkipy_kernel_0 [3f2a9c1b] add×2, dot, exp`` (kernel name, the start of
its cache key, the primitives it runs), so traces show which kernel the time went to. Whether
one records is torch's own module flag, read per call; nothing is created when it is off.

At exit the counters are written under each kernel cache the process used, as
``<cache>/stats/last_run.json`` (``last_run.rank<N>.json`` for each rank of a multi-process
run), atomically like the cache's own files; ``nkipy-ops stats <cache>`` prints them.

``kernel_stats()`` and ``reset_kernel_stats()`` are the Python API (exported from
``nkipy_core``). Calls of one kernel from several threads at once may lose a count: the adds
take no lock, which is what keeps them cheap.
"""

from __future__ import annotations

import atexit
import collections
import datetime
import json
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import attrs
import torch.autograd.profiler as _torch_profiler

from nkipy_core import _torch
from nkipy_core.cache.kernel_cache import STATS, atomic_write
from nkipy_core.cache.safety import make_private_dirs
from nkipy_core.config import env

log = logging.getLogger("nkipy.profiling")

#: the folder under a cache root that holds the last run's counters
STATS_DIR = "stats"
#: how many primitives an op summary names before it says how many more there are
SUMMARY_OPS = 6


def op_counts(kernel: Any) -> dict[str, int]:
    """How many times the IR ``kernel`` applies each primitive (constants are data, not ops):
    what a cache entry's ``meta.json`` stores as ``ops``, so a warm process need not lower the
    kernel to name it."""
    return dict(collections.Counter(op.prim for op in kernel.ops if op.prim != "constant"))


def op_summary(counts: Mapping[str, int]) -> str:
    """``add×2, dot, exp``: the primitives of ``op_counts``, most frequent first."""
    items = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    names = [name if n == 1 else f"{name}×{n}" for name, n in items[:SUMMARY_OPS]]
    if len(items) > SUMMARY_OPS:
        names.append(f"+{len(items) - SUMMARY_OPS} more")
    return ", ".join(names)


class _Event:
    """A call recorded as a ``torch.profiler`` event (only while a profiler records)."""

    __slots__ = ("scope", "start")

    def __init__(self, name: str):
        self.scope = _torch_profiler.record_function(name)
        self.scope.__enter__()
        self.start = perf_counter_ns()

    def close(self) -> int:
        self.scope.__exit__(None, None, None)
        return self.start


class KernelRecord:
    """The live counters of one kernel key, shared by every ``KernelCall`` of that kernel.

    A call does ``start = record.start()`` on entry and ``record.stop(start)`` on return."""

    __slots__ = (
        "key",
        "name",
        "ops",
        "roots",
        "bytes_in",
        "bytes_out",
        "event_name",
        "calls",
        "total_ns",
    )

    def __init__(self, key: str, name: str, ops: str, bytes_in: int, bytes_out: int):
        self.key, self.name, self.ops = key, name, ops
        #: the kernel caches it was loaded from or compiled into: where its counters go at exit
        self.roots: set[Path] = set()
        self.bytes_in, self.bytes_out = bytes_in, bytes_out
        self.event_name = f"{name} [{key[:8]}] {ops}".rstrip()
        self.calls = 0
        self.total_ns = 0

    def start(self) -> int | _Event:
        if _torch.profiler_enabled():
            return _Event(self.event_name)
        return perf_counter_ns()

    def stop(self, start: int | _Event) -> None:
        if not isinstance(start, int):
            start = start.close()
        self.total_ns += perf_counter_ns() - start
        self.calls += 1

    def __deepcopy__(self, memo: dict) -> KernelRecord:
        return self  # a copied graph's kernel is the same kernel: it counts into the same record

    def snapshot(self) -> KernelStats:
        return KernelStats(
            self.key,
            self.name,
            self.ops,
            self.calls,
            self.total_ns,
            self.calls * self.bytes_in,
            self.calls * self.bytes_out,
        )


@attrs.frozen
class KernelStats:
    """What one kernel did since the start (or ``reset_kernel_stats``): ``calls``, the time they
    took in all (``total_ns``, from entering the call to its results, staging included) and the
    bytes its inputs and outputs held over all calls."""

    key: str
    name: str
    ops: str
    calls: int
    total_ns: int
    bytes_in: int
    bytes_out: int

    @property
    def total_ms(self) -> float:
        return self.total_ns / 1e6

    @property
    def mean_us(self) -> float:
        return self.total_ns / self.calls / 1e3 if self.calls else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "total_ms": self.total_ms, "mean_us": self.mean_us}


_records: dict[str, KernelRecord] = {}
_lock = threading.Lock()
_exit_registered = False


def _nbytes(types: Iterable[Any]) -> int:
    return sum(t.size * t.dtype.numpy.itemsize for t in types)


def record(
    root: str | os.PathLike, key: str, name: str, ops: Mapping[str, int], signature: Any
) -> KernelRecord:
    """The record of kernel ``key`` (created on first use: a kernel called under two names keeps
    the first), whose counters go to the cache ``root`` at exit. ``ops``: its ``op_counts``;
    ``signature``: its executable's input and output types."""
    global _exit_registered
    with _lock:
        found = _records.get(key)
        if found is None:
            found = _records[key] = KernelRecord(
                key, name, op_summary(ops), _nbytes(signature.inputs), _nbytes(signature.outputs)
            )
        found.roots.add(Path(root))
        if not _exit_registered:
            atexit.register(write_last_run)
            _exit_registered = True
        return found


def kernel_stats() -> list[KernelStats]:
    """Every kernel called since the start or the last ``reset_kernel_stats()``, most total
    time first."""
    with _lock:
        stats = [r.snapshot() for r in _records.values() if r.calls]
    return sorted(stats, key=lambda s: (-s.total_ns, s.key))


def reset_kernel_stats() -> None:
    """Zero every kernel's counters (the kernels stay bound to their records)."""
    with _lock:
        for r in _records.values():
            r.calls = r.total_ns = 0


# -- the last run, on disk ---------------------------------------------------------------------


def _rank() -> tuple[int, int]:
    """(rank, world size) from the launcher's environment (torchrun sets both); at exit the
    process group may already be gone, the environment is not."""
    return env.RANK.get(), env.WORLD_SIZE.get()


def stats_file(root: Path, rank: int, world_size: int) -> Path:
    name = "last_run.json" if world_size <= 1 else f"last_run.rank{rank}.json"
    return root / STATS_DIR / name


def write_last_run() -> list[Path]:
    """Write each cache root's kernels' counters to its stats file (what runs at exit); the
    files written. Kernels never called are left out; a root whose kernels were never called
    still gets a file, so the CLI does not show an older run's numbers for this one. A kernel
    used from two caches (rare: one process, two ``nkipy_cache`` settings) goes to both with
    all its calls."""
    rank, world_size = _rank()
    with _lock:
        by_root: dict[Path, list[KernelStats]] = {}
        for r in _records.values():
            for root in r.roots:
                rows = by_root.setdefault(root, [])
                if r.calls:
                    rows.append(r.snapshot())
    written = []
    for root, rows in by_root.items():
        data = {
            "rank": rank,
            "world_size": world_size,
            "pid": os.getpid(),
            "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds"),
            "kernels": [s.as_dict() for s in sorted(rows, key=lambda s: (-s.total_ns, s.key))],
            "eager": eager_stats(),
        }
        path = stats_file(root, rank, world_size)
        try:
            make_private_dirs(path.parent)
            atomic_write(path, json.dumps(data, indent=2).encode(), path.parent)
        except OSError as exc:  # the cache is gone or read-only: nothing to report into
            log.debug("nkipy: could not write kernel statistics to %s: %s", path, exc)
            continue
        written.append(path)
    return written


#: the counters of eager fusion (``device/fusion.py``) a run's stats file keeps
EAGER_COUNTERS = ("eager_flush", "eager_per_op:", "eager_fused_compiles", "eager_fusion_storms")


def eager_stats() -> dict[str, int]:
    """What eager fusion did in this process (the device's eager counters of ``cache_stats``):
    ``eager_flushes`` and ``eager_flushed_ops`` (ops per flush: their ratio),
    ``eager_flush:<reason>`` per reason, ``eager_fused_compiles``, ``eager_per_op:<op>`` for
    each op that ran one by one instead of being queued, and ``eager_fusion_storms``."""
    return {k: v for k, v in sorted(STATS.items()) if k.startswith(EAGER_COUNTERS) and v}


def read_last_run(root: str | os.PathLike) -> list[dict[str, Any]]:
    """The stats files of the last run under the cache ``root``, by rank; empty if none.

    The last run is the newest file's: that file alone for a single process, else every rank's
    file of the same world size (a later run of as many ranks replaces them all)."""
    found = []
    for path in sorted((Path(root) / STATS_DIR).glob("last_run*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            log.warning(
                "nkipy: kernel statistics file %s is unreadable (%s); skipping it", path, exc
            )
            continue
        found.append({**data, "file": str(path)})
    if not found:
        return []
    newest = max(found, key=lambda d: d["finished"])
    if newest["world_size"] <= 1:
        return [newest]
    return sorted(
        (d for d in found if d["world_size"] == newest["world_size"]), key=lambda d: d["rank"]
    )
