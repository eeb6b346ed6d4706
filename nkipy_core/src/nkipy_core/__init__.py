"""nkipy-core: run PyTorch on AWS Trainium through NKIPy kernels.

Public API for users (``init_nkipy_backend``, the ``nkipy`` device, CPU regions) and for op packs
(``hookimpl``, ``knp``, ``Unsupported``, ``LoweringContext``, the registries and the IR in
``nkipy_core.ir``).

Attributes are imported on first use: torch's device autoload imports this package inside
``import torch``, so importing it must stay cheap. Importing it does not register the ``nkipy``
device: ``init_nkipy_backend(runtime=...)``, ``register_device()`` or ``NKIPY_RUNTIME`` do
(``nkipy_core.device.opt_in``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what ``__getattr__`` returns, for type checkers (imported lazily at run time)
    from nkipy_core import buckets as buckets
    from nkipy_core import config as config
    from nkipy_core import knp as knp
    from nkipy_core.cache.kernel_cache import STATS as _STATS
    from nkipy_core.cache.kernel_cache import CacheWarning as CacheWarning
    from nkipy_core.cache.trust import CacheTrustWarning as CacheTrustWarning
    from nkipy_core.compiler.fallback import FallbackWarning as FallbackWarning
    from nkipy_core.compiler.kernel_call import live_kernels as live_kernels
    from nkipy_core.compiler.lowering import LoweringContext as LoweringContext
    from nkipy_core.compiler.manifest import ManifestWarning as ManifestWarning
    from nkipy_core.compiler.regions import kernel_boundary as kernel_boundary
    from nkipy_core.compiler.regions import on_cpu as on_cpu
    from nkipy_core.config.env import declare_env as declare_env
    from nkipy_core.config.env import env as env
    from nkipy_core.config.settings import Config as Config
    from nkipy_core.device.opt_in import init_nkipy_backend as init_nkipy_backend
    from nkipy_core.device.registration import register_device as register_device
    from nkipy_core.errors import CacheError as CacheError
    from nkipy_core.errors import CacheLockTimeoutError as CacheLockTimeoutError
    from nkipy_core.errors import ConfigurationError as ConfigurationError
    from nkipy_core.errors import DeviceError as DeviceError
    from nkipy_core.errors import DeviceOutOfMemoryError as DeviceOutOfMemoryError
    from nkipy_core.errors import LoweringError as LoweringError
    from nkipy_core.errors import NkipyError as NkipyError
    from nkipy_core.errors import PluginConflictError as PluginConflictError
    from nkipy_core.errors import PluginError as PluginError
    from nkipy_core.errors import RecompileLimitError as RecompileLimitError
    from nkipy_core.errors import RuntimeNotFoundError as RuntimeNotFoundError
    from nkipy_core.errors import RuntimeUnavailableError as RuntimeUnavailableError
    from nkipy_core.errors import SpecializationLimitError as SpecializationLimitError
    from nkipy_core.errors import UnsafeCacheError as UnsafeCacheError
    from nkipy_core.errors import Unsupported as Unsupported
    from nkipy_core.errors import UnsupportedOpsError as UnsupportedOpsError
    from nkipy_core.errors import UnsupportedTorchError as UnsupportedTorchError
    from nkipy_core.errors import VerificationError as VerificationError
    from nkipy_core.observe.profiling import KernelStats as KernelStats
    from nkipy_core.observe.profiling import eager_stats as eager_stats
    from nkipy_core.observe.profiling import kernel_stats as kernel_stats
    from nkipy_core.observe.profiling import reset_kernel_stats as reset_kernel_stats
    from nkipy_core.plugin import manager as _manager
    from nkipy_core.plugin.hookspecs import hookimpl as hookimpl
    from nkipy_core.plugin.registry import DecompositionRegistry as DecompositionRegistry
    from nkipy_core.plugin.registry import LoweringRegistry as LoweringRegistry
    from nkipy_core.plugin.registry import Provenance as Provenance
    from nkipy_core.plugin.registry import RuleSet as RuleSet
    from nkipy_core.plugin.registry import RuntimeRegistry as RuntimeRegistry

    # exported under other names: assigned, as a renaming import is not an export
    cache_stats = _STATS
    plugins = _manager

_EXPORTS = {
    "knp": "nkipy_core.knp",
    # padding a dimension to a few sizes, where that is sound (prompts, batches): few kernel graphs
    "buckets": "nkipy_core.buckets",
    "config": "nkipy_core.config",
    # the plugin manager: ``plugins.register(obj, ...)`` and ``plugins.reload()`` for packs
    # registered in-process (pack tests, notebooks)
    "plugins": "nkipy_core.plugin.manager",
    "cache_stats": ("nkipy_core.cache.kernel_cache", "STATS"),
    # environment variables: packs declare theirs and read them through the one table
    "declare_env": ("nkipy_core.config.env", "declare_env"),
    "env": ("nkipy_core.config.env", "env"),
    "kernel_stats": ("nkipy_core.observe.profiling", "kernel_stats"),
    "eager_stats": ("nkipy_core.observe.profiling", "eager_stats"),
    "reset_kernel_stats": ("nkipy_core.observe.profiling", "reset_kernel_stats"),
    "KernelStats": ("nkipy_core.observe.profiling", "KernelStats"),
    "live_kernels": ("nkipy_core.compiler.kernel_call", "live_kernels"),
    "Config": ("nkipy_core.config.settings", "Config"),
    "init_nkipy_backend": ("nkipy_core.device.opt_in", "init_nkipy_backend"),
    "register_device": ("nkipy_core.device.registration", "register_device"),
    "FallbackWarning": ("nkipy_core.compiler.fallback", "FallbackWarning"),
    "CacheWarning": ("nkipy_core.cache.kernel_cache", "CacheWarning"),
    "CacheTrustWarning": ("nkipy_core.cache.trust", "CacheTrustWarning"),
    "ManifestWarning": ("nkipy_core.compiler.manifest", "ManifestWarning"),
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
            "DeviceOutOfMemoryError",
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


# torch before any module of ours, and after this package's names (the autoload uses them):
# importing torch runs its device autoload, which imports parts of this package; were torch first
# imported from inside one of our modules (``errors`` subclasses ``torch.OutOfMemoryError``), the
# autoload would find that module half-initialised. Inside torch's own autoload this is a no-op.
import torch  # noqa: E402, F401
