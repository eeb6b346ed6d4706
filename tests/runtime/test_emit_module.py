"""A whole emitted module converted to HLO: the ops' origins survive as HLO metadata, which is
how profiles of the compiled kernel point back at the ATen ops that built it."""

import attrs
import numpy as np
import pytest
from xla_oracle import assert_same

from nkipy_core.ir import PRIMITIVES, DType, KernelBuilder, TensorType
from nkipy_runtime import xla_bridge
from nkipy_runtime.stablehlo import EmissionError, emit_module, missing


def test_origins_become_hlo_metadata():
    kb = KernelBuilder("origins")
    x = kb.param(TensorType((2, 3), DType.f32))
    with kb.building("aten.exp.default"):
        e = kb.emit("exp", [x], {})
    with kb.building("aten.t.default"):
        t = kb.emit("transpose", [e], {"perm": (1, 0)})
    with kb.building("aten.index_select.default"):
        i = kb.emit("take", [t, kb.param(TensorType((2,), DType.i64))], {"axis": 0})
    kernel = kb.finish([i])
    hlo = xla_bridge.to_hlo(emit_module(kernel))
    for origin in ("aten.exp.default", "aten.t.default", "aten.index_select.default"):
        # OpMetadata.op_name is field 2 (tag 0x12), length-prefixed; the text printer omits
        # metadata, so read the proto neuronx-cc gets. Instruction names derive from it too.
        assert b"\x12" + bytes([len(origin)]) + origin.encode() in hlo.proto
        assert origin.replace(".", "_") in hlo.text
    inputs = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([2, -1])]
    assert_same(
        kernel, inputs, rtol=2 * np.finfo(np.float32).eps
    )  # exp: XLA's polynomial, not libm


def test_every_primitive_of_the_core_has_an_emitter():
    assert missing() == []


def test_a_primitive_without_an_emitter_is_named_by_missing_and_refused(monkeypatch):
    """A primitive added to the core without an emitter here fails this suite and refuses to
    emit, naming itself, instead of reaching neuronx-cc as something else."""
    monkeypatch.setitem(
        PRIMITIVES, "frobnicate", attrs.evolve(PRIMITIVES["neg"], name="frobnicate")
    )
    assert missing() == ["frobnicate"]
    kb = KernelBuilder("new")
    kernel = kb.finish([kb.emit("frobnicate", [kb.param(TensorType((2,), DType.f32))], {})])
    with pytest.raises(EmissionError, match="no StableHLO emitter for primitive 'frobnicate'"):
        emit_module(kernel)
