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
    "knp": "nkipy_core.knp",
    "config": "nkipy_core.config",
    # the plugin manager: ``plugins.register(obj, ...)`` and ``plugins.reload()`` for packs
    # registered in-process (pack tests, notebooks)
    "plugins": "nkipy_core.plugin.manager",
    "cache_stats": ("nkipy_core.cache.kernel_cache", "STATS"),
    # environment variables: packs declare theirs and read them through the one table
    "declare_env": ("nkipy_core.config.env", "declare_env"),
    "env": ("nkipy_core.config.env", "env"),
    "kernel_stats": ("nkipy_core.observe.profiling", "kernel_stats"),
    "reset_kernel_stats": ("nkipy_core.observe.profiling", "reset_kernel_stats"),
    "KernelStats": ("nkipy_core.observe.profiling", "KernelStats"),
    "Config": ("nkipy_core.config.settings", "Config"),
    "init_nkipy_backend": ("nkipy_core.config.settings", "init_nkipy_backend"),
    "FallbackWarning": ("nkipy_core.compiler.fallback", "FallbackWarning"),
    "hookimpl": ("nkipy_core.plugin.hookspecs", "hookimpl"),
    "LoweringContext": ("nkipy_core.compiler.lowering", "LoweringContext"),
    "on_cpu": ("nkipy_core.compiler.regions", "on_cpu"),
    "kernel_boundary": ("nkipy_core.compiler.regions", "kernel_boundary"),
    **{
        name: ("nkipy_core.errors", name)
        for name in (
            "CacheError",
            "CacheLockTimeoutError",
            "ConfigurationError",
            "DeviceError",
            "LoweringError",
            "NkipyError",
            "PluginConflictError",
            "PluginError",
            "RuntimeNotFoundError",
            "RuntimeUnavailableError",
            "SpecializationLimitError",
            "Unsupported",
            "UnsupportedOpsError",
            "UnsupportedTorchError",
            "VerificationError",
        )
    },
    **{
        name: ("nkipy_core.plugin.registry", name)
        for name in (
            "DecompositionRegistry",
            "LoweringRegistry",
            "Provenance",
            "RuleSet",
            "RuntimeRegistry",
        )
    },
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'nkipy_core' has no attribute {name!r}")
    if isinstance(target, str):
        value = importlib.import_module(target)
    else:
        value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def _register_device() -> None:
    """Never raises: torch's autoload imports this package inside ``import torch``."""
    try:
        import torch  # noqa: F401 - first: torch's autoload may register the device itself

        from nkipy_core.device.registration import register

        register()
    except Exception as exc:  # noqa: BLE001
        warnings.warn(
            f"nkipy: the nkipy device is not available: {type(exc).__name__}: {exc}",
            RuntimeWarning,
            stacklevel=3,
        )


_register_device()
