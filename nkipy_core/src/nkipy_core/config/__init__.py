"""The configuration layer: the process settings (``init_nkipy_backend``, per-compile options,
runtime selection) and the table of every environment variable nkipy reads (``env``).

``nkipy_core.config.Config`` and ``current()`` stay importable from here for users (their
``init_nkipy_backend`` is ``nkipy_core``'s, which also registers the device); the code lives in ``settings``, imported on first use so that reading the table of
variables (``nkipy_core.config.env``, which the hardware probe does) imports nothing more.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nkipy_core.config.settings import (
        Config,
        current,
        peek,
        reset,
        select_runtime,
    )

__all__ = ["Config", "current", "peek", "reset", "select_runtime"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module 'nkipy_core.config' has no attribute {name!r}")
    value = getattr(importlib.import_module("nkipy_core.config.settings"), name)
    globals()[name] = value
    return value
