"""What the ``nkipy-ops`` commands share: exit codes, the usage error, and the plugin state and
kernel cache directory their arguments name.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from nkipy_core.config.env import NKIPY_CACHE
from nkipy_core.plugin import manager as plugins

# Exit codes: 0 fine; 1 doctor found no usable runtime; 2 usage or plugin error (argparse's too).
EXIT_OK, EXIT_NO_RUNTIME, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    """A bad argument detected after parsing; reported like argparse's errors (exit 2)."""


def loaded_plugins(args: argparse.Namespace) -> plugins.Plugins:
    """The backend's own plugin state; ``--strict`` makes a skipped plugin an error."""
    return plugins.get(strict=args.strict)


def cache_dir(given: str | None) -> Path:
    """A ``DIR`` argument, else ``NKIPY_CACHE``, else ``./nkipy_cache`` (as the backend resolves it)."""
    return Path(given or NKIPY_CACHE.get()).resolve()
