"""Emitters of the indexing primitives: ``take``, ``take_along_axis`` (``stablehlo.gather``),
``scatter_add`` and ``scatter_reduce`` (``stablehlo.scatter`` with a combiner region).

Indices follow NumPy: a negative index counts from the end of its axis, so every emitter
first adds the axis size to negative indices. Out-of-range indices are where the two differ:
NumPy raises ``IndexError`` while XLA clamps a gather's start into range and drops a
scatter's out-of-range update. Kernels are built with indices in range (the primitive table
says so), so the difference never shows in a valid kernel.

Indices of any integer type are converted to s32 first (s64 only for an axis of 2^31 elements
or more, which no real tensor has): neuronx-cc wants s32 indices, trn1 computing 64-bit
integers in 32 bits; one index type per gather keeps the dimension numbers uniform; and u8
indices above 127 stay positive (the conversion zero-extends them). Indices in range fit s32
whatever their type.

Scatter combiners hold no ``or``/``and``, which neuronx-cc does not take as a combiner, and
booleans do not scatter as integers, which it refuses to combine: booleans scatter as f32 0/1
with ``maximum`` (NumPy's ``add`` and ``maximum`` on booleans) or ``minimum`` (``multiply``,
``minimum``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nkipy_core.ir import DType, TensorType

from .builder import FunctionBuilder, Val, i64_array, index_dtype
from .registry import emits


def _dims(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _wrapped(b: FunctionBuilder, indices: Val, size: int, dtype: DType) -> Val:
    """``indices`` as ``dtype``, a negative one counting from ``size`` (NumPy's reading)."""
    indices = b.convert(indices, dtype)
    negative = b.compare("LT", indices, b.full(0, indices.type))
    return b.select(negative, b.binary("add", indices, b.full(size, indices.type)), indices)


def _gather(
    b: FunctionBuilder,
    result: TensorType,
    x: Val,
    indices: Val,
    *,
    offset_dims: Sequence[int],
    collapsed: Sequence[int],
    index_map: Sequence[int],
    slice_sizes: Sequence[int],
) -> Val:
    numbers = (
        f"#stablehlo.gather<offset_dims = {_dims(offset_dims)}, collapsed_slice_dims = {_dims(collapsed)}, "
        f"start_index_map = {_dims(index_map)}, index_vector_dim = {indices.type.rank - 1}>"
    )
    return b.op(
        "stablehlo.gather",
        [x, indices],
        result,
        {
            "dimension_numbers": numbers,
            "slice_sizes": i64_array(slice_sizes),
            "indices_are_sorted": "false",
        },
    )


def _index_vectors(b: FunctionBuilder, indices: Val) -> Val:
    """``indices`` with a trailing dimension of 1: a one-element start vector per index."""
    return b.reshape(indices, (*indices.shape, 1))


@emits("take")
def _take(b: FunctionBuilder, result: TensorType, x: Val, indices: Val, *, axis: int) -> Val:
    """Whole slices of ``x`` along ``axis``: the result's dims are ``x``'s before ``axis``,
    then the indices' dims (the gather's batch dims), then ``x``'s after ``axis``."""
    n = x.shape[axis]
    starts = _index_vectors(b, _wrapped(b, indices, n, index_dtype(n)))
    rank, batch = x.type.rank, indices.type.rank
    return _gather(
        b,
        result,
        x,
        starts,
        offset_dims=[*range(axis), *range(axis + batch, rank - 1 + batch)],
        collapsed=[axis],
        index_map=[axis],
        slice_sizes=[1 if d == axis else n for d, n in enumerate(x.shape)],
    )


@emits("take_along_axis")
def _take_along_axis(
    b: FunctionBuilder, result: TensorType, x: Val, indices: Val, *, axis: int
) -> Val:
    """Element ``i`` of the result is ``x`` at ``i`` with ``indices[i]`` in place of its
    ``axis`` coordinate: a gather of single elements whose full start vectors are the
    indices along ``axis`` and iotas along every other dimension."""
    dtype = index_dtype(max(*x.shape, *indices.shape))  # one type for every coordinate
    coords = []
    for d in range(x.type.rank):
        if d == axis:
            coord = _wrapped(b, indices, x.shape[axis], dtype)
        else:
            coord = b.iota(TensorType(indices.shape, dtype), d)
        coords.append(_index_vectors(b, coord))
    starts = b.op(
        "stablehlo.concatenate",
        coords,
        TensorType((*indices.shape, x.type.rank), dtype),
        {"dimension": f"{x.type.rank} : i64"},
    )
    every = range(x.type.rank)
    return _gather(
        b,
        result,
        x,
        starts,
        offset_dims=[],
        collapsed=every,
        index_map=every,
        slice_sizes=[1] * x.type.rank,
    )


def _scatter(
    b: FunctionBuilder,
    x: Val,
    indices: Val,
    updates: Val,
    axis: int,
    kind: str,
) -> Val:
    """``x`` with each update combined into its position as scatter kind ``kind`` does; each of
    the 1-D ``indices`` picks a slice of ``x`` along ``axis``. ``updates`` broadcast (NumPy's
    rule) to those slices first, as the ``ufunc.at`` reference does. Booleans scatter as f32."""
    logical = x.dtype is DType.bool
    if logical:
        x, updates = b.convert(x, DType.f32), b.convert(updates, DType.f32)
        combine = _binary(_BOOL_COMBINERS[kind])
    else:
        combine = _COMBINERS[kind]
    updates = b.broadcast(
        updates, (*x.shape[:axis], indices.shape[0], *x.shape[axis + 1 :]), range(updates.type.rank)
    )
    n = x.shape[axis]
    starts = _index_vectors(b, _wrapped(b, indices, n, index_dtype(n)))
    scalar = TensorType((), x.dtype)
    with b.region(scalar, scalar) as (body, (old, new)):
        b.returns([combine(b, old, new)])
    numbers = (
        f"#stablehlo.scatter<update_window_dims = {_dims(d for d in range(x.type.rank) if d != axis)}, "
        f"inserted_window_dims = [{axis}], scatter_dims_to_operand_dims = [{axis}], index_vector_dim = 1>"
    )
    out = b.op(
        "stablehlo.scatter",
        [x, starts, updates],
        x.type,
        {
            "scatter_dimension_numbers": numbers,
            "indices_are_sorted": "false",
            "unique_indices": "false",
        },
        regions=[body],
    )
    return b.compare("NE", out, b.full(0, out.type)) if logical else out


Combiner = Callable[[FunctionBuilder, Val, Val], Val]


def _binary(name: str) -> Combiner:
    return lambda b, old, new: b.binary(name, old, new)


def _extremum(direction: str) -> Combiner:
    """``np.maximum``/``np.minimum`` of the old and the new value: the old one if it is NaN or
    strictly beyond the new one (``GT``/``LT``, false against a NaN), else the new one. So NaN
    wins from either side and a tie (``-0.0`` against ``0.0``) takes the new value's bits, as
    ``np.maximum.at`` does; compare and select do not depend on how a backend's ``maximum``
    treats NaN and signed zeros. Two selects rather than an ``or`` of the two tests, which
    neuronx-cc does not take in a combiner."""

    def combine(b: FunctionBuilder, old: Val, new: Val) -> Val:
        beyond = b.select(b.compare(direction, old, new), old, new)
        if not old.dtype.is_float:
            return beyond
        return b.select(b.compare("NE", old, old), old, beyond)

    return combine


_COMBINERS = {
    "add": _binary("add"),
    "prod": _binary("multiply"),
    "max": _extremum("GT"),
    "min": _extremum("LT"),
}

#: scatter kinds on booleans as f32 0/1: NumPy's ``add`` and ``maximum`` are or, the others and
_BOOL_COMBINERS = {"add": "maximum", "max": "maximum", "prod": "minimum", "min": "minimum"}


@emits("scatter_add")
def _scatter_add(
    b: FunctionBuilder, result: TensorType, x: Val, indices: Val, updates: Val, *, axis: int
) -> Val:
    return _scatter(b, x, indices, updates, axis, "add")


@emits("scatter_reduce")
def _scatter_reduce(
    b: FunctionBuilder,
    result: TensorType,
    x: Val,
    indices: Val,
    updates: Val,
    *,
    axis: int,
    kind: str,
) -> Val:
    return _scatter(b, x, indices, updates, axis, kind)
