"""Typed errors of nkipy.

Every error a user can hit is an ``NkipyError`` subclass whose message says what went wrong
and what to do next, so callers can catch the family and readers can act on the text.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = [
    "CacheError",
    "CacheLockTimeoutError",
    "CollectiveError",
    "ConfigurationError",
    "DeviceError",
    "DeviceOutOfMemoryError",
    "IRParseError",
    "LoweringError",
    "NkipyError",
    "PluginConflictError",
    "PluginError",
    "RecompileLimitError",
    "RuntimeNotFoundError",
    "RuntimeUnavailableError",
    "SpecializationLimitError",
    "UnsafeCacheError",
    "Unsupported",
    "UnsupportedOpsError",
    "UnsupportedTorchError",
    "VerificationError",
]


class NkipyError(Exception):
    """Base class of every error raised by nkipy on purpose."""


class ConfigurationError(NkipyError):
    """The backend settings are inconsistent (e.g. ``init_nkipy_backend`` called twice)."""


class PluginError(NkipyError):
    """A plugin failed to import or to register (raised instead of skipped in strict mode)."""


class PluginConflictError(PluginError):
    """Two providers registered the same op at the same priority."""


class RuntimeNotFoundError(NkipyError):
    """The requested runtime name is not registered by any installed plugin."""


class RuntimeUnavailableError(NkipyError):
    """The runtime is registered but cannot run on this machine."""


class DeviceError(NkipyError, RuntimeError):
    """The ``nkipy`` device was used wrongly: tensors on two devices in one eager op, a device
    index that does not exist. A ``RuntimeError`` too, like torch's own device errors."""


class DeviceOutOfMemoryError(DeviceError, torch.OutOfMemoryError):
    """An allocation on the ``nkipy`` device would pass its memory limit; the message names the
    bytes asked for, the bytes free and the limit. A ``torch.OutOfMemoryError`` too, so code
    written for CUDA's (``except torch.OutOfMemoryError``: skip a batch, halve it) handles it."""


class CollectiveError(NkipyError):
    """A collective cannot run: torch.distributed is not initialised, a kernel's groups do not
    match the process group's ranks, the ranks passed different tensors, or a peer timed out.
    Raised by kernels on the ``cpu`` runtime and by the ``nkipy`` process group alike."""


class CacheError(NkipyError):
    """The kernel cache directory cannot be used."""


class UnsafeCacheError(CacheError):
    """A kernel cache directory or key file could be changed by someone else (another owner,
    group- or world-writable): refused, as ssh refuses such key files."""


class CacheLockTimeoutError(CacheError):
    """Another live process held a kernel's compile lock longer than the lock timeout."""


class VerificationError(NkipyError):
    """An NKIPy kernel is ill-typed; the message names the op and the lowering rule that built it."""


class IRParseError(VerificationError):
    """IR text is not a kernel as nkipy prints it (``nkipy_core.ir.parser``): the message names the
    line and what was expected there. Raised, for one, when a cache entry's kernel was altered."""

    def __init__(self, line: int, message: str):
        self.line = line
        super().__init__(f"IR text, line {line}: {message}")


class LoweringError(NkipyError):
    """A lowering rule raised an unexpected exception while lowering a node."""


class UnsupportedOpsError(NkipyError):
    """Strict mode: some ops have no lowering and would have fallen back to CPU."""

    def __init__(self, ops: Iterable[str]):
        self.ops = sorted(set(ops))
        listed = "\n".join(f"  - {op}" for op in self.ops)
        super().__init__(
            f"{len(self.ops)} op(s) have no lowering in the installed packs (strict mode):\n{listed}\n"
            "Install a pack that lowers them (see `nkipy-ops list --coverage core-aten`), or "
            "compile with strict=False to run them on CPU."
        )


class SpecializationLimitError(NkipyError):
    """Strict mode: a graph with symbolic sizes met more size sets than ``max_specializations``."""


class RecompileLimitError(NkipyError):
    """A compiled function needed more kernel graphs than ``max_kernels``: its message lists
    what recompiled and why (the input whose size, stride or dtype changed) and what to do.

    Not a ``SpecializationLimitError``: that one is strict mode's answer to running out of
    specialisations, whereas this one is asked for (``max_kernels``, ``NKIPY_MAX_KERNELS``) to
    find a recompile storm in CI, and is raised in strict mode or not."""


class Unsupported(Exception):  # noqa: N818 - named for how rules read: `raise Unsupported("...")`
    """Raised by a lowering rule to decline one node; the next provider is tried, then CPU.

    It is not an ``NkipyError``: it is control flow between a rule and the driver, never shown to
    users except as the reason in a fallback warning.
    """


class UnsupportedTorchError(NkipyError):
    """The installed torch is outside the range this nkipy-core supports; the message names both."""
