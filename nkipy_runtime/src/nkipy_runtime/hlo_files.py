"""The HLO files every kernel cache entry of nkipy-runtime's runtimes holds: the StableHLO module,
the serialized ``HloModuleProto`` the Neuron compiler reads, and its text for people. ``xla``
compiles the first; ``nrt`` hands the second to ``neuronx-cc``."""

from __future__ import annotations

from nkipy_core.ir import Kernel

from . import xla_bridge
from .stablehlo import emit_module

STABLEHLO, HLO_PROTO, HLO_TEXT = "kernel.stablehlo.mlir", "hlo_module.pb", "hlo.txt"


def hlo_artifacts(
    kernel: Kernel, *, narrow_int64: bool = False, xla_cpu: bool = False
) -> dict[str, bytes]:
    """The files of ``kernel``; ``narrow_int64`` and ``xla_cpu`` as ``emit_module``
    takes them."""
    text = emit_module(kernel, narrow_int64=narrow_int64, xla_cpu=xla_cpu)
    hlo = xla_bridge.to_hlo(text)
    return {STABLEHLO: text.encode(), HLO_PROTO: hlo.proto, HLO_TEXT: hlo.text.encode()}
