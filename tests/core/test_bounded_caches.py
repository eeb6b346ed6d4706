"""The in-memory caches' bound and eviction counter (``nkipy_core.cache.lru``) and the key
recipes (``nkipy_core.cache.keys``)."""

import pytest

from nkipy_core import cache_stats
from nkipy_core.cache import keys
from nkipy_core.cache.lru import BoundedCache


def test_the_least_recently_used_entry_is_evicted_and_counted():
    cache: BoundedCache[str, int] = BoundedCache("test_lru", 2)
    before = cache_stats["test_lru_evictions"]
    cache["a"], cache["b"] = 1, 2
    assert cache.get("a") == 1  # "a" is now more recent than "b"
    cache["c"] = 3
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2 and cache_stats["test_lru_evictions"] == before + 1
    cache["c"] = 4  # replacing an entry evicts nothing
    assert cache_stats["test_lru_evictions"] == before + 1
    assert cache.get("b") is None
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
