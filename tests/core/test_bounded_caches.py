"""The in-memory caches' bound and eviction counter (``nkipy_core.cache.bounded``) and the key
recipes (``nkipy_core.cache.keys``)."""

import pytest

from nkipy_core import cache_stats
from nkipy_core.cache import keys
from nkipy_core.cache.bounded import BoundedCache


def test_the_oldest_entry_is_evicted_and_counted():
    cache: BoundedCache[str, int] = BoundedCache("test_bounded", 2)
    before = cache_stats["test_bounded_evictions"]
    cache["a"], cache["b"] = 1, 2
    cache["a"] = 10  # replacing an entry evicts nothing and keeps its place
    assert cache_stats["test_bounded_evictions"] == before
    cache["c"] = 3
    assert "a" not in cache and cache.get("b") == 2 and cache.get("c") == 3
    assert len(cache) == 2 and cache_stats["test_bounded_evictions"] == before + 1
    assert cache.get("a") is None
    with pytest.raises(ValueError, match="at least 1"):
        BoundedCache("empty", 0)


def test_keys_of_different_kinds_never_collide():
    parts = ("code", "runtime", "tag", "args", "versions")
    assert keys.kernel_key(*parts) != keys.plan_key("code", [], [], "versions", "runtime")
    assert keys.fx_key("base", "code", ["f32[2]"], []) != keys.fx_key(
        "base", "code", [], ["f32[2]"]
    )
    assert keys.digest("ab", "c") != keys.digest("a", "bc")
    assert keys.kernel_key(*parts) == keys.kernel_key(*parts)  # stable within and across runs
    assert keys.kernel_key(*parts) == keys.digest("kernel", *parts)
