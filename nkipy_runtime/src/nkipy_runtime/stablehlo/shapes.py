"""Emitters of the shape primitives and the sources: broadcast, reshape, transpose, reverse,
slice, concatenate, pad, iota and constant.

Each is one StableHLO op whose semantics already equal NumPy's once the attributes are
spelled out (NumPy's trailing alignment for ``broadcast``, ``interior_padding`` 0 for ``pad``);
the only composition is ``iota`` of booleans, which StableHLO has no iota for.
"""

from __future__ import annotations

import attrs

from nkipy_core.ir import ConstantData, DType, TensorType

from .builder import FunctionBuilder, Val, i64_array
from .registry import emits


@emits("broadcast")
def _broadcast(b: FunctionBuilder, result: TensorType, x: Val, *, shape: tuple[int, ...]) -> Val:
    return b.broadcast(x, shape)


@emits("reshape")
def _reshape(b: FunctionBuilder, result: TensorType, x: Val, *, shape: tuple[int, ...]) -> Val:
    return b.reshape(x, shape)


@emits("transpose")
def _transpose(b: FunctionBuilder, result: TensorType, x: Val, *, perm: tuple[int, ...]) -> Val:
    value = b.op("stablehlo.transpose", [x], result, {"permutation": i64_array(perm)})
    assert isinstance(value, Val)
    rank = len(perm)
    if rank >= 2 and perm == (*range(rank - 2), rank - 1, rank - 2):
        return attrs.evolve(value, swapped_from=x)
    return value


@emits("reverse")
def _reverse(b: FunctionBuilder, result: TensorType, x: Val, *, axes: tuple[int, ...]) -> Val:
    return b.op("stablehlo.reverse", [x], result, {"dimensions": i64_array(axes)})


@emits("slice")
def _slice(
    b: FunctionBuilder, result: TensorType, x: Val, *, start: tuple, limit: tuple, stride: tuple
) -> Val:
    return b.op(
        "stablehlo.slice",
        [x],
        result,
        {
            "start_indices": i64_array(start),
            "limit_indices": i64_array(limit),
            "strides": i64_array(stride),
        },
    )


@emits("concatenate")
def _concatenate(b: FunctionBuilder, result: TensorType, *xs: Val, axis: int) -> Val:
    return b.op("stablehlo.concatenate", list(xs), result, {"dimension": f"{axis} : i64"})


@emits("pad")
def _pad(
    b: FunctionBuilder, result: TensorType, x: Val, value: Val, *, low: tuple, high: tuple
) -> Val:
    return b.op(
        "stablehlo.pad",
        [x, value],
        result,
        {
            "edge_padding_low": i64_array(low),
            "edge_padding_high": i64_array(high),
            "interior_padding": i64_array([0] * x.type.rank),
        },
    )


@emits("iota")
def _iota(b: FunctionBuilder, result: TensorType, *, shape: tuple, dtype: DType, axis: int) -> Val:
    """``stablehlo.iota`` counts in the result type directly (floats and half floats are the
    index rounded once, as ``np.arange`` fills them). Booleans have no iota: count in u8 and
    compare with zero, which is ``np.arange(n, dtype=bool)`` for the only valid ``n <= 2``."""
    if dtype is DType.bool:
        counts = _iota(b, TensorType(shape, DType.u8), shape=shape, dtype=DType.u8, axis=axis)
        return b.compare("NE", counts, b.full(0, counts.type))
    return b.iota(result, axis)


@emits("constant")
def _constant(b: FunctionBuilder, result: TensorType, *, value: ConstantData) -> Val:
    return b.constant(value.array, value.dtype, value.shape)
