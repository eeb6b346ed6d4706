"""A bounded in-memory cache: the least recently used entry goes when a new one would pass the
bound, and each eviction is counted in ``cache_stats["<name>_evictions"]``.

Every in-memory cache that grows with what a program does (new shapes, new argument values) is
one of these, so a long-running process keeps a fixed amount of compiled state however varied
its calls. What a cache is for, its bound and its counter are listed in ``docs/caching.md``.
An evicted entry is rebuilt at its next use, usually from the on-disk kernel cache.
"""

from __future__ import annotations

import collections
from typing import Generic, TypeVar

from nkipy_core.cache.kernel_cache import STATS

K = TypeVar("K")
V = TypeVar("V")

_MISSING = object()


class BoundedCache(Generic[K, V]):
    """At most ``bound`` entries, evicted least recently used first (see the module docstring)."""

    __slots__ = ("name", "bound", "_entries", "_counter")

    def __init__(self, name: str, bound: int):
        if bound < 1:
            raise ValueError(f"the bound of cache {name} must be at least 1, got {bound}")
        self.name = name
        self.bound = bound
        self._entries: collections.OrderedDict[K, V] = collections.OrderedDict()
        self._counter = f"{name}_evictions"

    def get(self, key: K) -> V | None:
        """The entry of ``key`` (now the most recently used), or ``None``."""
        value = self._entries.get(key, _MISSING)
        if value is _MISSING:
            return None
        self._entries.move_to_end(key)
        return value  # type: ignore[return-value]

    def __setitem__(self, key: K, value: V) -> None:
        entries = self._entries
        entries[key] = value
        entries.move_to_end(key)
        if len(entries) > self.bound:
            entries.popitem(last=False)
            STATS[self._counter] += 1

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def items(self) -> list[tuple[K, V]]:
        """The entries, least recently used first (a copy: reading them changes no order)."""
        return list(self._entries.items())
