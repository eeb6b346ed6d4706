"""Emitters of the contraction, reduction, scan and sort primitives: ``dot``, ``reduce``,
``argreduce``, ``cumulative`` and ``sort``.

The reference is NumPy (``nkipy_core.ir.primitives``); the forms are the ones neuronx-cc
accepts. A reduce (and a scan's ``reduce_window``) combines with ``add``, ``multiply``,
``maximum`` or ``minimum`` from a constant init and has a single result; a sort's comparator is
a single ``compare`` LT. Where NumPy's semantics need more, the work happens outside the
regions, in elementwise ops:

- ``argmax``/``argmin`` (the first extreme index, NaN counting as the extreme) is a max/min
  reduce of the values, then a min reduce of the indices of the values that match it;
- booleans reduce and scan as u8 0/1, ``or`` being ``maximum`` and ``and`` ``minimum``;
- ``sort`` orders an integer key computed from NumPy's key value (``-x`` when descending,
  wrapping for integers): a float's bits made monotonic, with NaN last.

``max``/``min`` need nothing extra: StableHLO's ``maximum``/``minimum`` propagate NaN as
``np.max`` does. Scans are ``reduce_window`` over the whole prefix, quadratic in the axis length.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from nkipy_core.ir import DType, TensorType

from .builder import FunctionBuilder, Val, i64_array, index_dtype
from .registry import emits

#: a matrix product with at most this many rows is computed transposed on XLA's CPU backend
SKINNY_ROWS = 64
#: ... when its other operand, a transposed weight, holds at least this many elements
SKINNY_MIN_WEIGHT = 1 << 16


@emits("dot")
def _dot(b: FunctionBuilder, result: TensorType, x: Val, y: Val) -> Val:
    """``np.matmul``: leading dimensions are batch, ``x``'s last contracts with ``y``'s
    second-to-last.

    XLA's CPU backend runs a dot fastest on its operands as they are: it upcasts the operands
    of a dot that reads a transposed bf16 operand, and it runs a bf16 dot summing in f32 on the
    bf16 instructions, twice as fast as the f32 dot of the widened operands (torch's oneDNN kernel
    does the same). So the dot reads through an operand that only widens a half float to f32
    (products of half floats are exact in f32: the sums are the same) and through a ``y`` that
    only swaps the last two axes (its contracting dimension is then the other one).

    For XLA's CPU backend (``FunctionBuilder.xla_cpu``) two more forms, each measured on its
    library's kernels (``docs/runtimes.md``):

    - an ``x`` that swaps the last two axes (a weight gradient's ``dy.T @ x``) is written out
      first: a dot contracting its left operand's rows runs 1.2-1.6x slower than the copy and
      the row-major dot together;
    - a 2-D f32 ``x @ w.T`` with at most ``SKINNY_ROWS`` rows (a linear layer on a few tokens)
      is computed as ``(w @ x.T).T``: the product then walks the large weight in its own order,
      1.2-2.5x faster, and the transpose of the small result is cheap. XLA folds a transpose
      into its dot, so the product ends in an optimization barrier."""
    half_x, half_y = x.widened_from, y.widened_from
    if result.dtype is DType.f32 and half_x and half_y and half_x.dtype is half_y.dtype:
        x, y = half_x, half_y
    lhs_contracting, rhs_contracting = x.type.rank - 1, y.type.rank - 2
    if x.swapped_from is not None:
        if b.xla_cpu:
            (x,) = b.op("stablehlo.optimization_barrier", [x], [x.type])
        else:
            x, lhs_contracting = x.swapped_from, x.type.rank - 2
    if y.swapped_from is not None:
        y, rhs_contracting = y.swapped_from, y.type.rank - 1
        if b.xla_cpu and _skinny(result, x, y):
            flipped = _dot_general(b, TensorType(result.shape[::-1], result.dtype), y, x, 1, 1)
            (flipped,) = b.op("stablehlo.optimization_barrier", [flipped], [flipped.type])
            return b.op(
                "stablehlo.transpose", [flipped], result, {"permutation": i64_array([1, 0])}
            )
    return _dot_general(b, result, x, y, lhs_contracting, rhs_contracting)


def _skinny(result: TensorType, x: Val, w: Val) -> bool:
    """Whether ``x @ w.T`` (``w`` as it lies) is a 2-D f32 product of a few rows with a large
    weight (``_dot``)."""
    return (
        result.rank == 2
        and result.dtype is x.dtype is w.dtype is DType.f32
        and result.shape[0] <= SKINNY_ROWS
        and math.prod(w.shape) >= SKINNY_MIN_WEIGHT
    )


def _dot_general(
    b: FunctionBuilder,
    result: TensorType,
    x: Val,
    y: Val,
    lhs_contracting: int,
    rhs_contracting: int,
) -> Val:
    """``stablehlo.dot_general`` over the leading dimensions as batch."""
    batch = list(range(x.type.rank - 2))
    numbers = (
        [f"lhs_batching_dimensions = {batch}", f"rhs_batching_dimensions = {batch}"]
        if batch
        else []
    )
    numbers += [
        f"lhs_contracting_dimensions = [{lhs_contracting}]",
        f"rhs_contracting_dimensions = [{rhs_contracting}]",
    ]
    return b.op(
        "stablehlo.dot_general",
        [x, y],
        result,
        {"dot_dimension_numbers": f"#stablehlo.dot<{', '.join(numbers)}>"},
    )


# -- monoids shared by reduce and cumulative -------------------------------------------------


def _extreme(b: FunctionBuilder, dtype: DType, *, highest: bool) -> int | float:
    """The identity of ``min`` (``highest``) or ``max``: infinity, or the integer type's bound;
    the 32-bit bound for i64/u64 where the target computes those in 32 bits
    (``b.narrow_int64``), since a 64-bit one would be cut there."""
    if dtype.is_float:
        return math.inf if highest else -math.inf
    if b.narrow_int64 and dtype in (DType.i64, DType.u64):
        dtype = DType.i32 if dtype is DType.i64 else DType.u32
    info = np.iinfo(dtype.numpy)
    return int(info.max if highest else info.min)


_COMBINERS = {"sum": "add", "prod": "multiply", "max": "maximum", "min": "minimum"}

#: NumPy's reduce kinds on booleans: ``add``, ``maximum`` and ``logical_or`` are or, the others and
_BOOL_OR = {"sum": True, "max": True, "any": True, "prod": False, "min": False, "all": False}


def _monoid(b: FunctionBuilder, kind: str, dtype: DType) -> tuple[int | float, str]:
    """Identity and combining op of reduce kind ``kind`` (sum, prod, max, min) on numbers.
    StableHLO's maximum/minimum are IEEE-754 maximum/minimum: NaN propagates, as in ``np.max``."""
    identity = {"sum": 0, "prod": 1}
    init = identity[kind] if kind in identity else _extreme(b, dtype, highest=kind == "min")
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


def _reduced(
    b: FunctionBuilder, x: Val, init: int | float, combiner: str, axes: Sequence[int]
) -> Val:
    """One single-result ``stablehlo.reduce`` of ``x`` over ``axes``."""
    return b.op(
        "stablehlo.reduce",
        [x, b.constant(init, x.dtype)],
        TensorType(_drop(x.shape, axes), x.dtype),
        {"dimensions": i64_array(sorted(axes))},
        [_region(b, combiner, x.dtype)],
    )


def summed(b: FunctionBuilder, x: Val, axes: Sequence[int]) -> Val:
    """``x`` summed over ``axes``, which are dropped: one ``stablehlo.reduce``."""
    return _reduced(b, x, 0, "add", axes)


def _scanned(b: FunctionBuilder, x: Val, init: int | float, combiner: str, axis: int) -> Val:
    """An inclusive scan as ``reduce_window``: element ``i`` combines the window of the axis'
    length ending at ``i`` (padded with the identity before the start)."""
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


def _logical(b: FunctionBuilder, x: Val, kind: str, apply: Callable[[Val, int, str], Val]) -> Val:
    """A reduce or scan of booleans ``x`` by ``kind``, computed as ``apply(bytes, init,
    combiner)`` on 0/1 bytes: neuronx-cc combines with no ``or``/``and``, and on 0/1 they are
    ``maximum`` (identity 0) and ``minimum`` (identity 1). Nonzero bytes are true again."""
    init, combiner = (0, "maximum") if _BOOL_OR[kind] else (1, "minimum")
    out = apply(b.convert(x, DType.u8), init, combiner)
    return b.compare("NE", out, b.full(0, out.type))


@emits("reduce")
def _reduce(
    b: FunctionBuilder, result: TensorType, x: Val, *, kind: str, axes: tuple, keepdims: bool
) -> Val:
    if kind in ("any", "all") and x.dtype is not DType.bool:
        x = b.compare("NE", x, b.full(0, x.type))  # NumPy's truth: nonzero, NaN included
    if x.dtype is DType.bool:
        reduced = _logical(
            b, x, kind, lambda u8, init, combiner: _reduced(b, u8, init, combiner, axes)
        )
    else:
        reduced = _reduced(b, x, *_monoid(b, kind, x.dtype), axes)
    return b.reshape(reduced, result.shape)


# -- argmax / argmin -------------------------------------------------------------------------


@emits("argreduce")
def _argreduce(
    b: FunctionBuilder, result: TensorType, x: Val, *, kind: str, axis: int, keepdims: bool
) -> Val:
    """NumPy's first index of the extreme, NaN counting as the extreme. neuronx-cc has no
    variadic (value, index) reduce, so it is two single-result ones: ``m``, the max (min) of
    the values, NaN if any is NaN since maximum/minimum propagate it; then the min of the
    indices of the values matching ``m`` (equal, or NaN where ``m`` is), every other position
    counting as the axis size ``n``, which is above every index and fits s32."""
    if x.dtype is DType.bool:
        x = b.convert(x, DType.u8)
    highest = kind == "argmin"
    m = _reduced(
        b, x, _extreme(b, x.dtype, highest=highest), "minimum" if highest else "maximum", [axis]
    )
    m = b.broadcast(m, x.shape, [d for d in range(x.type.rank) if d != axis])
    match = b.compare("EQ", x, m)
    if x.dtype.is_float:
        match = b.select(b.compare("NE", m, m), b.compare("NE", x, x), match)
    n = x.shape[axis]
    index = b.iota(TensorType(x.shape, index_dtype(n)), axis)
    first = _reduced(b, b.select(match, index, b.full(n, index.type)), n, "minimum", [axis])
    return b.reshape(b.convert(first, result.dtype), result.shape)


# -- scans -----------------------------------------------------------------------------------

_SCAN_KINDS = {"cumsum": "sum", "cumprod": "prod", "cummax": "max", "cummin": "min"}


@emits("cumulative")
def _cumulative(b: FunctionBuilder, result: TensorType, x: Val, *, kind: str, axis: int) -> Val:
    if x.type.size == 0:
        return x
    kind = _SCAN_KINDS[kind]
    if x.dtype is DType.bool:
        return _logical(
            b, x, kind, lambda u8, init, combiner: _scanned(b, u8, init, combiner, axis)
        )
    return _scanned(b, x, *_monoid(b, kind, x.dtype), axis)


# -- sort ------------------------------------------------------------------------------------


def _float_key(b: FunctionBuilder, v: Val) -> Val:
    """A signed integer ordered as the floats ``v``, NaN last: neuronx-cc's sort comparator is
    one ``compare``, which cannot also order NaN. Half floats widen to f32 (exactly); ``-0.0``
    becomes ``+0.0`` (they tie in NumPy); a negative float's bits, as a signed integer, order
    backwards, so all but the sign bit flip; every NaN gets the type's maximum, so NaNs come
    after every number and keep their order (the sort is stable)."""
    if v.dtype.is_half:
        v = b.convert(v, DType.f32)
    zero = b.full(0, v.type)
    v = b.select(b.compare("EQ", v, zero), zero, v)
    int_type = TensorType(v.shape, DType.i32 if v.dtype is DType.f32 else DType.i64)
    top = int(np.iinfo(int_type.dtype.numpy).max)
    bits = b.op("stablehlo.bitcast_convert", [v], int_type)
    flipped = b.binary("xor", bits, b.full(top, int_type))
    key = b.select(b.compare("LT", bits, b.full(0, int_type)), flipped, bits)
    return b.select(b.compare("NE", v, v), b.full(top, int_type), key)


def _sort_key(b: FunctionBuilder, x: Val, descending: bool) -> Val:
    """An integer key ordered as NumPy's sort orders ``x``. NumPy's key value is ``-x`` when
    descending, which wraps for integers (``-(-128)`` is -128 in i8, ``-1`` is 255 in u8), so
    the order is that of the wrapped key, not a reversed one; floats go through ``_float_key``.
    Booleans become u8 (NumPy rejects ``-`` on them, so the cpu runtime has no descending
    bool sort to match; True first is what a descending sort of booleans means)."""
    if x.dtype is DType.bool:
        return b.convert(b.op("stablehlo.not", [x], x.type) if descending else x, DType.u8)
    v = b.binary("subtract", b.full(0, x.type), x) if descending else x
    return _float_key(b, v) if v.dtype.is_float else v


@emits("sort")
def _sort(
    b: FunctionBuilder, result: TensorType, x: Val, *, axis: int, descending: bool, indices: bool
) -> Val:
    """A stable sort of (key, payload) by the integer key alone (one ``compare`` LT, signed or
    unsigned as the key's type), the payload being the values ``x`` themselves (so their bits,
    NaN payloads and ``-0.0`` included, are what comes out) or s32 indices."""
    key = _sort_key(b, x, descending)
    payload = b.iota(TensorType(x.shape, index_dtype(x.shape[axis])), axis) if indices else x
    operands = [key, payload] if key is not payload else [key]
    types = [t for o in operands for t in (_scalar(o.dtype),) * 2]
    with b.region(*types) as (body, args):
        b.returns([b.compare("LT", args[0], args[1])])
    sorted_ = b.op(
        "stablehlo.sort",
        operands,
        [o.type for o in operands],
        {"dimension": f"{axis} : i64", "is_stable": "true"},
        [body],
    )
    return b.convert(sorted_[-1], result.dtype)
