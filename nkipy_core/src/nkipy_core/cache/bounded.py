"""A bounded in-memory cache: when a new entry would pass the bound, the oldest entry goes, and
each eviction is counted in ``cache_stats["<name>_evictions"]``.

Every in-memory cache that grows with what a program does (new shapes, new argument values) is
one of these, so a long-running process keeps a fixed amount of compiled state however varied
its calls. What a cache is for, its bound and its counter are listed in ``docs/caching.md``.
An evicted entry is rebuilt at its next use, usually from the on-disk kernel cache.

The eager device looks one up on every op, so a hit must cost what a dict lookup costs: the
cache *is* a dict (``get`` and ``in`` are the C ones) and only an insertion runs Python. That is
why the oldest *inserted* entry goes rather than the least recently used one: keeping recency
would put a Python call on every hit (about 0.4 µs per eager op, measured). A working set larger
than the bound (thousands of signatures) cycles through it either way.
"""

from __future__ import annotations

from typing import TypeVar

from nkipy_core.cache.kernel_cache import STATS

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(dict[K, V]):
    """At most ``bound`` entries, the oldest evicted first (see the module docstring). Fill it
    by item assignment only: ``update`` and ``setdefault`` are dict's and would skip the bound."""

    __slots__ = ("name", "bound", "_counter")

    def __init__(self, name: str, bound: int):
        super().__init__()
        if bound < 1:
            raise ValueError(f"the bound of cache {name} must be at least 1, got {bound}")
        self.name = name
        self.bound = bound
        self._counter = f"{name}_evictions"

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self and len(self) >= self.bound:
            del self[next(iter(self))]
            STATS[self._counter] += 1
        super().__setitem__(key, value)
