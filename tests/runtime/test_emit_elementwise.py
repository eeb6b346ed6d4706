"""The elementwise emitters (stablehlo/elementwise.py) on XLA against the NumPy reference,
over every element type each primitive's type rule accepts.

Exact unless a primitive is transcendental: XLA's CPU kernels for those are polynomial
approximations, not the C library NumPy calls, so they may differ in the last bits.
"""

import numpy as np
import pytest
from op_kernels import ALL_DTYPES, accepts, one_op, sample
from xla_oracle import assert_same

from nkipy_core.ir import DType, Kernel, KernelBuilder, TensorType

#: relative tolerance per transcendental primitive, in units of the f32 epsilon (1.2e-7); f16
#: and bf16 compute in f32 and round once, so they agree unless a result sits at a rounding
#: boundary of the narrow type (one of its ulps: 2**-10 and 2**-7).
TRANSCENDENTAL_ULPS = {
    "exp": 2,
    "log": 2,
    "log1p": 2,
    "expm1": 2,
    "sqrt": 1,
    "rsqrt": 2,
    "sin": 2,
    "cos": 2,
    "tan": 4,
    "tanh": 4,
    "atan": 2,
    "logistic": 4,
    "erf": 4,
    "erfc": 16,
    "pow": 4,
    "atan2": 2,
}  # erfc: relative error grows in its deep tail (1e-17 and below), where it is tiny
HALF_ULP = {DType.f16: 2**-10, DType.bf16: 2**-7, DType.f32: 0.0, DType.f64: 0.0}


def _rtol(prim: str, dtype: DType) -> float:
    """f64 is held to f32-like bounds scaled down by 2**-29 (its extra mantissa bits); integer
    results (``pow`` of integers) are exact."""
    if prim not in TRANSCENDENTAL_ULPS or not dtype.is_float:
        return 0.0
    ulps = TRANSCENDENTAL_ULPS[prim] * np.finfo(np.float32).eps
    return max(ulps * (2**-29 if dtype is DType.f64 else 1), HALF_ULP[dtype])


UNARY = [
    "exp",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "tanh",
    "atan",
    "logistic",
    "erf",
    "erfc",
    "floor",
    "ceil",
    "round",
    "isnan",
    "isinf",
    "signbit",
    "neg",
    "abs",
    "sign",
    "not",
    "bitwise_not",
]
BINARY = [
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "maximum",
    "minimum",
    "remainder",
    "fmod",
    "floor_divide",
    "atan2",
    "and",
    "or",
    "xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
]


def _dtypes(prim: str, arity: int) -> list[DType]:
    return [d for d in ALL_DTYPES if accepts(prim, arity, d)]


def _sweep(prim: str, cases: list[list[np.ndarray]]) -> tuple[Kernel, list[np.ndarray]]:
    """One kernel applying ``prim`` to each case's inputs (one output per case): one XLA
    compile per primitive keeps the sweeps over dtypes and shapes fast."""
    kb = KernelBuilder(f"sweep_{prim}")
    outs, flat = [], []
    with kb.building(f"test.{prim}"):
        for arrays in cases:
            args = [kb.param(TensorType(a.shape, DType.from_numpy(a.dtype))) for a in arrays]
            outs.append(kb.emit(prim, args, {}))
            flat += arrays
    return kb.finish(outs), flat


def _first_dtype(names, arity):
    """Each primitive with the first dtype it accepts, for the 0-d and empty shapes."""
    return [(p, _dtypes(p, arity)[0]) for p in names]


@pytest.mark.parametrize(
    ("prim", "dtype"), _first_dtype(UNARY, 1) + _first_dtype(BINARY, 2), ids=str
)
def test_scalar_and_empty(prim, dtype):
    shapes = [(), (0, 3)]
    kernel, inputs = _sweep(
        prim,
        [[sample(dtype, s)] if prim in UNARY else _binary_inputs(prim, dtype, s) for s in shapes],
    )
    assert_same(kernel, inputs, rtol=_rtol(prim, dtype))


def _unary_input(dtype: DType) -> np.ndarray:
    x = sample(dtype, (5, 8))
    if np.issubdtype(dtype.numpy, np.signedinteger):
        x.flat[0] = np.iinfo(dtype.numpy).min  # abs and neg of the minimum wrap in both
    return x


@pytest.mark.parametrize("prim", UNARY)
def test_unary(prim):
    dtypes = _dtypes(prim, 1)
    kernel, inputs = _sweep(prim, [[_unary_input(d)] for d in dtypes])
    assert_same(kernel, inputs, rtol=[_rtol(prim, d) for d in dtypes])


#: divisors of integer remainder/floor_divide/fmod must not be zero (undefined in both)
_INTEGER_DIVISIONS = ("remainder", "floor_divide", "fmod")


def _binary_inputs(prim: str, dtype: DType, shape) -> list[np.ndarray]:
    x, y = sample(dtype, shape, 0), sample(dtype, shape, 1)
    if prim == "pow" and not dtype.is_float:
        # NumPy raises on negative integer exponents; small bases keep the powers in range
        return [sample(dtype, shape, 0, low=-4, high=5), sample(dtype, shape, 1, low=0, high=6)]
    if dtype.is_float:
        y = np.roll(y, 3)  # pairs specials with ordinary values and with each other
    elif prim in _INTEGER_DIVISIONS:
        y = np.where(y == 0, 7, y).astype(dtype.numpy)
    return [x, y]


@pytest.mark.parametrize("prim", BINARY)
def test_binary(prim):
    dtypes = _dtypes(prim, 2)
    kernel, inputs = _sweep(prim, [_binary_inputs(prim, d, (5, 8)) for d in dtypes])
    assert_same(kernel, inputs, rtol=[_rtol(prim, d) for d in dtypes])


@pytest.mark.parametrize("prim", ["remainder", "floor_divide", "fmod", "div"])
@pytest.mark.parametrize("dtype", [DType.f16, DType.bf16, DType.f32, DType.f64], ids=str)
def test_float_division_by_zero_and_signs(prim, dtype):
    """Every pairing of signed zeros, infinities, NaN and signed finite values, the divisor
    zero included: NumPy's float remainder/floor_divide define each of them."""
    values = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 7.5, -7.5, 2.0, -3.0], dtype.numpy
    )
    x, y = (a.reshape(-1).copy() for a in np.meshgrid(values, values))
    assert_same(one_op(prim, [x, y]), [x, y])


@pytest.mark.parametrize(
    "dtype", [d for d in ALL_DTYPES if d is not DType.bool and not d.is_float], ids=str
)
def test_integer_division_signs(dtype):
    """Integer remainder and floor_divide round toward negative infinity, as Python's do."""
    values = np.array([-9, -7, -1, 1, 3, 7, 9, 100])
    values = values[values >= 0] if np.issubdtype(dtype.numpy, np.unsignedinteger) else values
    x, y = (a.reshape(-1).astype(dtype.numpy) for a in np.meshgrid(values, values))
    for prim in ("remainder", "floor_divide", "fmod"):
        assert_same(one_op(prim, [x, y]), [x, y])


def test_round_is_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 1e30, -0.0], np.float32)
    assert_same(one_op("round", [x]), [x])


def _converts(x: np.ndarray, targets) -> Kernel:
    """One kernel converting ``x`` to each of ``targets`` (one output each): one compile for
    a whole row of the conversion table."""
    kb = KernelBuilder("converts")
    arg = kb.param(TensorType(x.shape, DType.from_numpy(x.dtype)))
    with kb.building("test.convert"):
        outs = [kb.emit("convert", [arg], {"dtype": d}) for d in targets]
    return kb.finish(outs)


@pytest.mark.parametrize("src", ALL_DTYPES, ids=str)
def test_convert(src):
    """Float to integer truncates toward zero; NaN, infinities and values out of the
    integer's range are undefined in C (and so in NumPy), so floats going to integers are
    made finite within [-100, 100), and non-negative for unsigned targets."""
    x = sample(src, (5, 8))
    unsigned = [d for d in ALL_DTYPES if np.issubdtype(d.numpy, np.unsignedinteger)]
    if not src.is_float:
        assert_same(_converts(x, ALL_DTYPES), [x])
        return
    special = [d for d in ALL_DTYPES if d.is_float or d is DType.bool]
    assert_same(_converts(x, special), [x])
    finite = np.nan_to_num(x.astype(np.float64), nan=1.0, posinf=99.5, neginf=-99.5).astype(
        src.numpy
    )
    signed = [d for d in ALL_DTYPES if d.is_integer and d not in unsigned]
    assert_same(_converts(finite, signed), [finite])
    magnitude = np.abs(finite)
    assert_same(_converts(magnitude, unsigned), [magnitude])


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_select(dtype):
    inputs = [sample(DType.bool, (4, 5), 2), sample(dtype, (4, 5), 0), sample(dtype, (4, 5), 1)]
    assert_same(one_op("select", inputs), inputs)
