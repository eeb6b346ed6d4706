"""Errors of the ``nkipy`` process group (typed, so callers can tell ours from torch's)."""

from __future__ import annotations

from nkipy_core import NkipyError


class CollectiveError(NkipyError):
    """A collective of the ``nkipy`` process group failed or timed out on this rank."""
