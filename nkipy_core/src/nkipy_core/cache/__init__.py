"""The on-disk kernel cache and its counters.

Every cache nkipy keeps, its key and its bound are listed in ``docs/caching.md``.
"""
