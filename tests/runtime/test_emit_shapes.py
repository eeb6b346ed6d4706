"""The shape and source emitters (stablehlo/shapes.py) on XLA against the NumPy reference.

These ops only move or make data, so the comparison is byte for byte: signed zeros, NaNs and
bf16 bits must come through unchanged, for every element type of the IR.
"""

import ml_dtypes
import numpy as np
import pytest
from op_kernels import ALL_DTYPES, one_op, sample
from xla_oracle import assert_same_bits, run_on_xla

from nkipy_core.ir import ConstantData, DType

#: (primitive, operand shapes, params); operands are sampled in the dtype under test
CASES = [
    ("broadcast", [(3, 1)], {"shape": (2, 3, 4)}),
    ("broadcast", [()], {"shape": (2, 3)}),
    ("broadcast", [(1,)], {"shape": (0,)}),
    ("broadcast", [(2, 3)], {"shape": (2, 3)}),
    ("reshape", [(2, 3, 4)], {"shape": (4, 6)}),
    ("reshape", [(1,)], {"shape": ()}),
    ("reshape", [(0, 3)], {"shape": (3, 0, 1)}),
    ("transpose", [(2, 3, 4)], {"perm": (2, 0, 1)}),
    ("transpose", [()], {"perm": ()}),
    ("reverse", [(2, 3, 4)], {"axes": (0, 2)}),
    ("reverse", [(5,)], {"axes": (0,)}),
    ("reverse", [(0, 3)], {"axes": (1,)}),
    ("slice", [(5, 6)], {"start": (1, 0), "limit": (5, 6), "stride": (2, 4)}),
    ("slice", [(5, 6)], {"start": (3, 2), "limit": (3, 6), "stride": (1, 3)}),
    ("slice", [()], {"start": (), "limit": (), "stride": ()}),
    ("concatenate", [(2, 3), (2, 0), (2, 1)], {"axis": 1}),
    ("concatenate", [(4,)], {"axis": 0}),
    ("pad", [(2, 3), ()], {"low": (1, 0), "high": (0, 2)}),
    ("pad", [(0, 2), ()], {"low": (1, 1), "high": (0, 0)}),
]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize(("prim", "shapes", "params"), CASES, ids=lambda c: str(c))
def test_shape_op(prim, shapes, params, dtype):
    inputs = [sample(dtype, s, seed=i) for i, s in enumerate(shapes)]
    assert_same_bits(one_op(prim, inputs, **params), inputs)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize(("shape", "axis"), [((2, 3), 0), ((2, 3), 1), ((0, 4), 1), ((2,), 0)])
def test_iota(shape, axis, dtype):
    if dtype is DType.bool:
        shape = tuple(min(d, 2) for d in shape)  # np.arange(n, dtype=bool) exists for n <= 2 only
    assert_same_bits(one_op("iota", [], shape=shape, dtype=dtype, axis=axis), [])


@pytest.mark.parametrize("dtype", [DType.f16, DType.bf16, DType.i8, DType.u8], ids=str)
def test_iota_counts_past_exact_range(dtype):
    """bf16 holds integers exactly up to 256 and f16 up to 2048; beyond, each count is rounded
    once to the type, as np.arange fills it. Narrow integers count up to their maximum."""
    n = {DType.f16: 2100, DType.bf16: 300, DType.i8: 127, DType.u8: 255}[dtype]
    assert_same_bits(one_op("iota", [], shape=(n,), dtype=dtype, axis=0), [])


@pytest.mark.parametrize(
    "value",
    [
        np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-45], np.float32),
        np.full((3, 2), -0.0, np.float64),  # a splat of -0.0 stays negative
        np.array([0.0, -0.0], np.float32),  # equal under ==, not a splat
        np.full((4,), np.nan, np.float16),  # a NaN splat
        np.array([1.5, np.nan, -0.0, 3e38], ml_dtypes.bfloat16),
        np.array(-7, np.int8),
        np.array([0, 255, 7], np.uint8),
        np.array([2**63 - 1, -(2**63)], np.int64),
        np.array([2**64 - 1, 0], np.uint64),
        np.array([[True, False], [False, True]]),
        np.array(True),
        np.full((3,), False),
        np.zeros((0,), np.float32),
        np.zeros((0, 3), np.int32),
        np.zeros((2, 0), np.bool_),
        np.random.default_rng(0)
        .standard_normal((64, 33))
        .astype(np.float32),  # a blob in kernel.py
        np.random.default_rng(1).random((20, 30)) < 0.5,
    ],
    ids=lambda v: f"{v.dtype}{list(v.shape)}",
)
def test_constant_keeps_exact_bits(value):
    """Compared with the constant's own bytes, not with the cpu runtime: kernel.py writes small
    float constants as decimal literals, which drop a NaN's sign and bf16's ``-0.0``."""
    data = ConstantData.from_array(value, DType.from_numpy(value.dtype))
    (got,) = run_on_xla(one_op("constant", [], value=data), [])
    assert (got.dtype, got.shape) == (value.dtype, value.shape)
    assert got.tobytes() == data.data
