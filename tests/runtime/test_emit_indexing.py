"""The indexing emitters (stablehlo/indexing.py) on XLA against the NumPy reference.

Gathers move data, so they compare byte for byte. Scatters combine values: ``add`` and
``prod`` with repeated indices accumulate in index order on both sides (XLA's CPU scatter is
a sequential loop, like ``ufunc.at``), so they compare exactly too; half floats compute in f32
and round once on both sides.
"""

import numpy as np
import pytest
from op_kernels import ALL_DTYPES, one_op, sample
from xla_oracle import assert_same, assert_same_bits

from nkipy_core.ir import DType

INDEX_DTYPES = (DType.i8, DType.i16, DType.i32, DType.i64, DType.u8, DType.u32, DType.u64)
NUMERIC = tuple(d for d in ALL_DTYPES if d is not DType.bool)


def _indices(values, dtype: DType, size: int) -> np.ndarray:
    """``values`` in ``dtype``; negative ones (NumPy counts them from the end of an axis of
    ``size``) become their positive equivalent where the type is unsigned."""
    values = np.asarray(values)
    if not np.issubdtype(dtype.numpy, np.signedinteger):
        values = np.where(values < 0, values + size, values)
    return values.astype(dtype.numpy)


#: (operand shape, indices, axis): index ranks 0, 1 and 2, negative indices, repeats, empties
TAKE_CASES = [
    ((4, 5), [3, -1, 0, 3], 0),
    ((4, 5), [[0, -5], [4, 2]], 1),
    ((2, 3, 4), 2, 2),
    ((2, 3, 4), -3, 1),
    ((2, 3, 4), np.zeros((0,), int), 1),
    ((3, 0), [2, 0], 0),
    ((6,), [[[5]]], 0),
]


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize(("shape", "indices", "axis"), TAKE_CASES, ids=str)
def test_take(shape, indices, axis, index_dtype):
    inputs = [sample(DType.f32, shape), _indices(indices, index_dtype, shape[axis])]
    assert_same_bits(one_op("take", inputs, axis=axis), inputs)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_take_every_dtype(dtype):
    inputs = [sample(dtype, (3, 4)), np.array([[1, -1], [0, 2]], np.int64)]
    assert_same_bits(one_op("take", inputs, axis=1), inputs)


#: (operand shape, indices shape, axis); index values are drawn in [-n, n) along the axis
ALONG_CASES = [
    ((2, 3, 4), (2, 3, 4), 2),
    ((2, 3, 4), (2, 5, 4), 1),
    ((4, 3), (2, 3), 0),
    ((5,), (7,), 0),
    ((2, 3), (2, 0), 1),
]


@pytest.mark.parametrize("index_dtype", [DType.i8, DType.i32, DType.i64, DType.u8], ids=str)
@pytest.mark.parametrize(("shape", "index_shape", "axis"), ALONG_CASES, ids=str)
def test_take_along_axis(shape, index_shape, axis, index_dtype):
    n = shape[axis]
    raw = np.random.default_rng(1).integers(-n, n, index_shape)
    inputs = [sample(DType.f32, shape), _indices(raw, index_dtype, n)]
    assert_same_bits(one_op("take_along_axis", inputs, axis=axis), inputs)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_take_along_axis_every_dtype(dtype):
    inputs = [sample(dtype, (3, 4)), np.array([[3, 0, -1, 1]] * 3, np.int32)]
    assert_same_bits(one_op("take_along_axis", inputs, axis=1), inputs)


def test_u8_indices_above_127_stay_positive():
    """u8 indices of 128 and more (an s8 reading would make them negative, counting from the
    end) pick those positions in every gather and scatter."""
    x = sample(DType.f32, (2, 200))
    take = np.array([130, 199, 0, 128, 127], np.uint8)
    along = np.array([[128, 1, 199], [150, 129, 0]], np.uint8)
    upd = sample(DType.f32, (2, 5), 1)
    for prim, inputs, params in [
        ("take", [x, take], {"axis": 1}),
        ("take_along_axis", [x, along], {"axis": 1}),
        ("scatter_reduce", [x, take, upd], {"axis": 1, "kind": "max"}),
    ]:
        assert_same_bits(one_op(prim, inputs, **params), inputs)
    inputs = [x, take, upd]
    assert_same(one_op("scatter_add", inputs, axis=1), inputs)


#: (operand shape, 1-D indices, updates shape, axis): repeated and negative indices accumulate
SCATTER_CASES = [
    ((5,), [0, 4, -1, 0, 2, 0], (6,), 0),
    ((2, 3, 4), [2, -3, 2], (2, 3, 4), 1),
    ((2, 3, 4), [1, 1], (1, 3, 2), 2),  # updates broadcast along size-1 dims, as ufunc.at does
    ((3, 2), np.zeros((0,), int), (0, 2), 0),
]


@pytest.mark.parametrize("dtype", NUMERIC + (DType.bool,), ids=str)
@pytest.mark.parametrize(("shape", "indices", "upd_shape", "axis"), SCATTER_CASES, ids=str)
def test_scatter_add(shape, indices, upd_shape, axis, dtype):
    inputs = [
        sample(dtype, shape, 0, low=-20, high=20),
        _indices(indices, DType.i64, shape[axis]),
        sample(dtype, upd_shape, 1, low=-20, high=20),
    ]
    assert_same(one_op("scatter_add", inputs, axis=axis), inputs)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
def test_scatter_add_index_dtypes(index_dtype):
    inputs = [
        sample(DType.i32, (4, 3)),
        _indices([3, -4, 3, 1], index_dtype, 4),
        sample(DType.i32, (4, 3), 1),
    ]
    assert_same(one_op("scatter_add", inputs, axis=0), inputs)


@pytest.mark.parametrize("kind", ["max", "min", "prod"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize(("shape", "indices", "upd_shape", "axis"), SCATTER_CASES[:2], ids=str)
def test_scatter_reduce(shape, indices, upd_shape, axis, dtype, kind):
    """Float samples hold NaN, +-inf and both zeros, so max/min show NaN propagating from the
    operand and from an update, and which zero a tie keeps."""
    low, high = (
        (-3, 4) if kind == "prod" else (-100, 100)
    )  # products of small factors stay in range
    inputs = [
        sample(dtype, shape, 0, low=low, high=high),
        _indices(indices, DType.i32, shape[axis]),
        sample(dtype, upd_shape, 1, low=low, high=high),
    ]
    kernel = one_op("scatter_reduce", inputs, axis=axis, kind=kind)
    if kind == "prod":
        assert_same(kernel, inputs)
    else:
        assert_same_bits(kernel, inputs)
