"""nkipy-core: run PyTorch on AWS Trainium through NKIPy kernels.

Public API for users (``init_nkipy_backend``) and for op packs (``hookimpl``, ``knp``,
``Unsupported``, ``LoweringContext``, the registries and the IR in ``nkipy_core.ir``).
"""

from . import knp
from .cache import STATS as cache_stats
from . import config
from .config import Config, init_nkipy_backend
from .errors import (
    CacheError,
    ConfigurationError,
    LoweringError,
    NkipyError,
    PluginConflictError,
    PluginError,
    RuntimeNotFoundError,
    RuntimeUnavailableError,
    Unsupported,
    UnsupportedOpsError,
    VerificationError,
)
from .compiler import FallbackWarning
from .hookspecs import hookimpl
from .lowering import LoweringContext
from .registry import DecompositionRegistry, LoweringRegistry, Provenance, RuleSet, RuntimeRegistry

__all__ = [
    "CacheError", "Config", "ConfigurationError", "DecompositionRegistry", "FallbackWarning",
    "LoweringContext", "LoweringError", "LoweringRegistry", "NkipyError", "PluginConflictError",
    "PluginError", "Provenance", "RuntimeNotFoundError", "RuntimeRegistry",
    "RuleSet", "RuntimeUnavailableError", "Unsupported", "UnsupportedOpsError", "VerificationError",
    "cache_stats", "config", "hookimpl", "init_nkipy_backend", "knp",
]
