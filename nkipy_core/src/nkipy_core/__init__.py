"""nkipy-core: run PyTorch on AWS Trainium through NKIPy kernels.

Public API for users (``init_nkipy_backend``, the ``nkipy`` device, CPU regions) and for op packs
(``hookimpl``, ``knp``, ``Unsupported``, ``LoweringContext``, the registries and the IR in
``nkipy_core.ir``).

Attributes are imported on first use: torch's device autoload imports this package inside
``import torch``, so importing it must stay cheap. Importing it registers the ``nkipy`` device
(a no-op when torch's autoload already did).
"""

from __future__ import annotations

import importlib
import warnings

_EXPORTS = {
    "knp": ".knp",
    "config": ".config",
    "cache_stats": (".cache", "STATS"),
    "kernel_stats": (".profiling", "kernel_stats"),
    "reset_kernel_stats": (".profiling", "reset_kernel_stats"),
    "KernelStats": (".profiling", "KernelStats"),
    "Config": (".config", "Config"),
    "init_nkipy_backend": (".config", "init_nkipy_backend"),
    "FallbackWarning": (".compiler", "FallbackWarning"),
    "hookimpl": (".hookspecs", "hookimpl"),
    "LoweringContext": (".lowering", "LoweringContext"),
    "on_cpu": (".regions", "on_cpu"),
    "kernel_boundary": (".regions", "kernel_boundary"),
    **{name: (".errors", name) for name in (
        "CacheError", "CacheLockTimeoutError", "ConfigurationError", "DeviceError", "LoweringError",
        "NkipyError", "PluginConflictError", "PluginError", "RuntimeNotFoundError",
        "RuntimeUnavailableError", "SpecializationLimitError", "Unsupported", "UnsupportedOpsError",
        "VerificationError",
    )},
    **{name: (".registry", name) for name in (
        "DecompositionRegistry", "LoweringRegistry", "Provenance", "RuleSet", "RuntimeRegistry",
    )},
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'nkipy_core' has no attribute {name!r}")
    if isinstance(target, str):
        value = importlib.import_module(target, __name__)
    else:
        value = getattr(importlib.import_module(target[0], __name__), target[1])
    globals()[name] = value
    return value


def _register_device() -> None:
    """Never raises: torch's autoload imports this package inside ``import torch``."""
    try:
        import torch  # noqa: F401 - first: torch's autoload may register the device itself

        from .device.registration import register

        register()
    except Exception as exc:  # noqa: BLE001
        warnings.warn(
            f"nkipy: the nkipy device is not available: {type(exc).__name__}: {exc}",
            RuntimeWarning, stacklevel=3,
        )


_register_device()
