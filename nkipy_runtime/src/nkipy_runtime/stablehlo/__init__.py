"""NKIPy IR -> StableHLO: one emitter per primitive (``registry.EMITTERS``) and the module writer."""

from .module import EmissionError, emit_module
from .registry import EMITTERS, missing

__all__ = ["EMITTERS", "EmissionError", "emit_module", "missing"]
