"""The configuration layer: the process settings (``init_nkipy_backend``, per-compile options,
runtime selection) and the table of every environment variable nkipy reads.

``nkipy_core.config.Config``, ``current()`` and ``init_nkipy_backend`` stay importable from here
for users; the code lives in ``settings``.
"""

from nkipy_core.config.settings import (
    Config,
    current,
    init_nkipy_backend,
    peek,
    reset,
    select_runtime,
)

__all__ = ["Config", "current", "init_nkipy_backend", "peek", "reset", "select_runtime"]
