"""Emitters of the contraction, reduction, scan and sort primitives: ``dot``, ``reduce``,
``argreduce``, ``cumulative`` and ``sort``.

The reference is NumPy (``nkipy_core.ir.primitives``), so the combiners and comparators here
spell out what NumPy does where StableHLO has no single op for it: ``argmax`` and ``argmin``
return the first index and count NaN as the extreme, a boolean ``sum`` is ``or``, and ``sort``
orders by NumPy's key (``-x`` when descending, wrapping for integers) with NaN last.
``max``/``min`` need nothing extra: StableHLO's ``maximum``/``minimum`` propagate NaN as
``np.max`` does. Scans are ``reduce_window`` over the whole prefix, quadratic in the axis length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from nkipy_core.ir import DType, TensorType

from .builder import FunctionBuilder, Val, i64_array
from .registry import emits


@emits("dot")
def _dot(b: FunctionBuilder, result: TensorType, x: Val, y: Val) -> Val:
    """``np.matmul``: leading dimensions are batch, ``x``'s last contracts with ``y``'s second-to-last."""
    batch = list(range(x.type.rank - 2))
    numbers = (
        [f"lhs_batching_dimensions = {batch}", f"rhs_batching_dimensions = {batch}"]
        if batch
        else []
    )
    numbers += [
        f"lhs_contracting_dimensions = [{x.type.rank - 1}]",
        f"rhs_contracting_dimensions = [{y.type.rank - 2}]",
    ]
    return b.op(
        "stablehlo.dot_general",
        [x, y],
        result,
        {"dot_dimension_numbers": f"#stablehlo.dot<{', '.join(numbers)}>"},
    )


# -- monoids shared by reduce and cumulative -------------------------------------------------


def _extreme(dtype: DType, *, highest: bool) -> bool | int | float:
    """The identity of ``min`` (``highest``) or ``max``: infinity, or the integer type's bound."""
    if dtype.is_float:
        return math.inf if highest else -math.inf
    if dtype is DType.bool:
        return highest
    info = np.iinfo(dtype.numpy)
    return int(info.max if highest else info.min)


#: reduce kinds on booleans, where NumPy's add/multiply/maximum/minimum are or/and
_BOOL_KINDS = {"sum": "any", "max": "any", "prod": "all", "min": "all"}
_COMBINERS = {
    "sum": "add",
    "prod": "multiply",
    "max": "maximum",
    "min": "minimum",
    "any": "or",
    "all": "and",
}


def _monoid(kind: str, dtype: DType) -> tuple[bool | int | float, str]:
    """Identity and combining op of reduce kind ``kind`` on ``dtype`` values. StableHLO's
    maximum/minimum are IEEE-754 maximum/minimum: NaN propagates, as in ``np.max``."""
    if dtype is DType.bool:
        kind = _BOOL_KINDS.get(kind, kind)
    identity = {"sum": 0, "prod": 1, "any": False, "all": True}
    init = identity[kind] if kind in identity else _extreme(dtype, highest=kind == "min")
    return init, _COMBINERS[kind]


def _scalar(dtype: DType) -> TensorType:
    return TensorType((), dtype)


def _region(b: FunctionBuilder, combiner: str, dtype: DType) -> list[str]:
    with b.region(_scalar(dtype), _scalar(dtype)) as (body, (x, y)):
        b.returns([b.binary(combiner, x, y)])
    return body


def reduction_region(b: FunctionBuilder, kind: str, dtype: DType) -> list[str]:
    """The region combining two ``dtype`` scalars as reduce kind ``kind`` (``sum``, ``prod``,
    ``max``, ``min``) does: what the reducing collectives (``collectives``) are given."""
    return _region(b, _COMBINERS[kind], dtype)


def _drop(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    return tuple(d for i, d in enumerate(shape) if i not in axes)


@emits("reduce")
def _reduce(
    b: FunctionBuilder, result: TensorType, x: Val, *, kind: str, axes: tuple, keepdims: bool
) -> Val:
    if kind in ("any", "all") and x.dtype is not DType.bool:
        x = b.compare("NE", x, b.full(0, x.type))  # NumPy's truth: nonzero, NaN included
    init, combiner = _monoid(kind, x.dtype)
    reduced = b.op(
        "stablehlo.reduce",
        [x, b.constant(init, x.dtype)],
        TensorType(_drop(x.shape, axes), x.dtype),
        {"dimensions": i64_array(sorted(axes))},
        [_region(b, combiner, x.dtype)],
    )
    return b.reshape(reduced, result.shape)


# -- argmax / argmin -------------------------------------------------------------------------


def _ranks_first(b: FunctionBuilder, direction: str, x: Val, y: Val) -> Val:
    """``x`` comes before ``y`` in the order ``direction`` (``GT`` for argmax) with NaN first."""
    beats = b.compare(direction, x, y)
    if not x.dtype.is_float:
        return beats
    pred = beats.type
    x_nan, y_nan = b.compare("NE", x, x), b.compare("NE", y, y)
    only_x_nan = b.op("stablehlo.and", [x_nan, b.op("stablehlo.not", [y_nan], pred)], pred)
    return b.op("stablehlo.or", [beats, only_x_nan], pred)


def _ties(b: FunctionBuilder, x: Val, y: Val) -> Val:
    """``x`` and ``y`` hold the same rank: equal, or both NaN."""
    equal = b.compare("EQ", x, y)
    if not x.dtype.is_float:
        return equal
    both_nan = b.op("stablehlo.and", [b.compare("NE", x, x), b.compare("NE", y, y)], equal.type)
    return b.op("stablehlo.or", [equal, both_nan], equal.type)


@emits("argreduce")
def _argreduce(
    b: FunctionBuilder, result: TensorType, x: Val, *, kind: str, axis: int, keepdims: bool
) -> Val:
    """A variadic reduce over (value, index): the better value wins, a tie goes to the lower
    index, so the combiner is associative and the result is NumPy's first extreme index."""
    direction = "GT" if kind == "argmax" else "LT"
    index = b.iota(TensorType(x.shape, DType.i64), axis)
    # the identity loses every comparison and every tie (its index is above any real one)
    init = [
        b.constant(_extreme(x.dtype, highest=kind == "argmin"), x.dtype),
        b.constant(np.iinfo(np.int64).max, DType.i64),
    ]
    with b.region(_scalar(x.dtype), _scalar(DType.i64), _scalar(x.dtype), _scalar(DType.i64)) as (
        body,
        args,
    ):
        xv, xi, yv, yi = args
        lower = b.compare("LT", xi, yi)
        tie_to_x = b.op("stablehlo.and", [_ties(b, xv, yv), lower], lower.type)
        take_x = b.op("stablehlo.or", [_ranks_first(b, direction, xv, yv), tie_to_x], lower.type)
        b.returns([b.select(take_x, xv, yv), b.select(take_x, xi, yi)])
    reduced = _drop(x.shape, [axis])
    _, indices = b.op(
        "stablehlo.reduce",
        [x, index, *init],
        [TensorType(reduced, x.dtype), TensorType(reduced, DType.i64)],
        {"dimensions": i64_array([axis])},
        [body],
    )
    return b.reshape(indices, result.shape)


# -- scans -----------------------------------------------------------------------------------

_SCAN_KINDS = {"cumsum": "sum", "cumprod": "prod", "cummax": "max", "cummin": "min"}


@emits("cumulative")
def _cumulative(b: FunctionBuilder, result: TensorType, x: Val, *, kind: str, axis: int) -> Val:
    """An inclusive scan as ``reduce_window``: element ``i`` combines the window of the axis'
    length ending at ``i`` (padded with the identity before the start)."""
    if x.type.size == 0:
        return x
    init, combiner = _monoid(_SCAN_KINDS[kind], x.dtype)
    n = x.shape[axis]
    window = [n if i == axis else 1 for i in range(x.type.rank)]
    padding = [[n - 1, 0] if i == axis else [0, 0] for i in range(x.type.rank)]
    return b.op(
        "stablehlo.reduce_window",
        [x, b.constant(init, x.dtype)],
        x.type,
        {
            "window_dimensions": i64_array(window),
            "padding": f"dense<{padding}> : tensor<{x.type.rank}x2xi64>",
        },
        [_region(b, combiner, x.dtype)],
    )


# -- sort ------------------------------------------------------------------------------------


def _sort_key(b: FunctionBuilder, x: Val, descending: bool) -> Val:
    """NumPy's key: ``-x`` when descending, which wraps for integers (``-(-128)`` is -128 in
    i8, ``-1`` is 255 in u8), so the order is that of the wrapped key, not a reversed one."""
    if not descending:
        return x
    if x.dtype is DType.bool:
        # NumPy rejects ``-`` on booleans, so the cpu runtime has no descending bool sort
        # to match; True first is what a descending sort of booleans means.
        return b.op("stablehlo.not", [x], x.type)
    return b.binary("subtract", b.full(0, x.type), x)


def _before(b: FunctionBuilder, x: Val, y: Val) -> Val:
    """``x < y`` in NumPy's sort order, where NaN goes after every number."""
    less = b.compare("LT", x, y)
    if not x.dtype.is_float:
        return less
    pred = less.type
    nan_after = b.op("stablehlo.and", [b.compare("EQ", x, x), b.compare("NE", y, y)], pred)
    return b.op("stablehlo.or", [less, nan_after], pred)


@emits("sort")
def _sort(
    b: FunctionBuilder, result: TensorType, x: Val, *, axis: int, descending: bool, indices: bool
) -> Val:
    """A stable sort of (key, payload) by key, payload being the values or their indices."""
    key = _sort_key(b, x, descending)
    payload = b.iota(result, axis) if indices else x
    operands = [key, payload] if key is not payload else [key]
    types = [t for o in operands for t in (_scalar(o.dtype),) * 2]
    with b.region(*types) as (body, args):
        b.returns([_before(b, args[0], args[1])])
    sorted_ = b.op(
        "stablehlo.sort",
        operands,
        [o.type for o in operands],
        {"dimension": f"{axis} : i64", "is_stable": "true"},
        [body],
    )
    return sorted_[-1]
