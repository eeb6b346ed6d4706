"""The caches' shared parts: the on-disk kernel cache and its counters (``kernel_cache``), how
every cache key is built (``keys``) and the bounded in-memory cache (``bounded``).

Every cache nkipy keeps, its key and its bound are listed in ``docs/caching.md``.
"""
