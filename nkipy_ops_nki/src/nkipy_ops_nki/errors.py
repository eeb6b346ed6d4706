"""Typed errors of the NKI interpreter.

Each message starts with ``<file>:<line> in <function>: `` naming the line of the *kernel* that
did it (not the interpreter's), because that is the line the user has to change, and ends with
what to change.
"""

from __future__ import annotations

from nkipy_core import NkipyError


class NKIError(NkipyError):
    """A kernel used the NKI language in a way the hardware (or its compiler) would reject."""


class NKILimitError(NKIError):
    """A tile or an instruction is larger than a hardware limit (partitions, PSUM, SBUF, matmul)."""


class NKIIndexError(NKIError):
    """A load, store or tile access reaches outside the tensor it indexes."""
