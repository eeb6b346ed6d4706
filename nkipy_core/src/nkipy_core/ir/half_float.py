"""How an op on half floats (f16, bf16) computes: one rule for every runtime, torch's.

A ``half_compute`` primitive (``Primitive.half_compute``) with a half-float operand or result
converts its half-float operands to f32, computes, and rounds the result once, as torch's CPU
kernels do. A conversion to a half float from f64, i64 or i32 goes through f32 (rounded twice):
torch builds ``c10::Half`` and ``BFloat16`` from a float, where a direct cast rounds once. The
cpu runtime's NumPy code (``codegen``) and the emitters of other runtimes (nkipy-runtime's
StableHLO) ask ``half_float_rule`` for each op, so their results agree with torch and each other.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from nkipy_core.ir.primitives import primitive
from nkipy_core.ir.types import DType, TensorType


class HalfFloat(enum.Enum):
    """What an op does with half floats."""

    #: computes in its own element types (no half float, or a primitive exact in them)
    EXACT = "exact"
    #: half-float operands widened to f32, the f32 result rounded to the result type
    COMPUTE_IN_F32 = "compute in f32"
    #: a ``convert`` from a wide type to a half float, converted to f32 first
    CONVERT_THROUGH_F32 = "convert through f32"


#: element types a conversion to a half float rounds to f32 first, as torch does
_THROUGH_F32 = frozenset({DType.f64, DType.i64, DType.i32})


def half_float_rule(
    prim_name: str, operand_types: Sequence[TensorType], result_type: TensorType
) -> HalfFloat:
    """How the op ``prim_name`` over ``operand_types`` giving ``result_type`` computes."""
    if (
        prim_name == "convert"
        and result_type.dtype.is_half
        and operand_types[0].dtype in _THROUGH_F32
    ):
        return HalfFloat.CONVERT_THROUGH_F32
    if primitive(prim_name).half_compute and any(
        t.dtype.is_half for t in (*operand_types, result_type)
    ):
        return HalfFloat.COMPUTE_IN_F32
    return HalfFloat.EXACT
