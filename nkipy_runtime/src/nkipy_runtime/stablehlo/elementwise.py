"""Emitters of the elementwise primitives: unary and binary math, comparisons, logic,
``select`` and ``convert``.

The reference semantics are NumPy's (``nkipy_core.ir.primitives``); where a StableHLO op
differs from NumPy (``remainder`` takes the divisor's sign, ``floor_divide`` rounds down,
``atan`` and ``signbit`` have no single op) the emitter composes the NumPy result.
"""

from __future__ import annotations

from functools import partial

from nkipy_core.ir import DType, TensorType

from .builder import FunctionBuilder, Val
from .registry import emits

#: primitives that are one StableHLO (or CHLO) op of the same name on their operand's type
_SAME_TYPE_UNARY = {
    "exp": "stablehlo.exponential",
    "log": "stablehlo.log",
    "log1p": "stablehlo.log_plus_one",
    "expm1": "stablehlo.exponential_minus_one",
    "sqrt": "stablehlo.sqrt",
    "rsqrt": "stablehlo.rsqrt",
    "sin": "stablehlo.sine",
    "cos": "stablehlo.cosine",
    "tan": "stablehlo.tan",
    "tanh": "stablehlo.tanh",
    "logistic": "stablehlo.logistic",
    "erf": "chlo.erf",
    "erfc": "chlo.erfc",
    "floor": "stablehlo.floor",
    "ceil": "stablehlo.ceil",
    "round": "stablehlo.round_nearest_even",
    "neg": "stablehlo.negate",
    "bitwise_not": "stablehlo.not",
}
_SAME_TYPE_BINARY = {
    "add": "stablehlo.add",
    "sub": "stablehlo.subtract",
    "mul": "stablehlo.multiply",
    "div": "stablehlo.divide",
    "pow": "stablehlo.power",
    "maximum": "stablehlo.maximum",
    "minimum": "stablehlo.minimum",
    "fmod": "stablehlo.remainder",
    "atan2": "stablehlo.atan2",
    "bitwise_and": "stablehlo.and",
    "bitwise_or": "stablehlo.or",
    "bitwise_xor": "stablehlo.xor",
}
_COMPARE = {"eq": "EQ", "ne": "NE", "lt": "LT", "le": "LE", "gt": "GT", "ge": "GE"}


def _one_op(op_name: str, b: FunctionBuilder, result: TensorType, *operands: Val) -> Val:
    return b.op(op_name, list(operands), result)


for _prim, _op in {**_SAME_TYPE_UNARY, **_SAME_TYPE_BINARY}.items():
    emits(_prim)(partial(_one_op, _op))


for _prim, _direction in _COMPARE.items():
    emits(_prim)(lambda b, result, x, y, direction=_direction: b.compare(direction, x, y))


_UNSIGNED = (DType.u8, DType.u32, DType.u64)


def _truth(b: FunctionBuilder, x: Val) -> Val:
    """``x`` as booleans, NumPy's way: nonzero is true (NaN included)."""
    return x if x.dtype is DType.bool else b.compare("NE", x, b.full(0, x.type))


@emits("not")
def _not(b: FunctionBuilder, result: TensorType, x: Val) -> Val:
    return b.unary("not", _truth(b, x))


for _prim, _logical in {"and": "and", "or": "or", "xor": "xor"}.items():
    emits(_prim)(lambda b, result, x, y, op=_logical: b.binary(op, _truth(b, x), _truth(b, y)))


@emits("sign")
def _sign(b: FunctionBuilder, result: TensorType, x: Val) -> Val:
    """StableHLO's ``sign`` takes signed types only; an unsigned value's sign is ``x != 0``."""
    if x.dtype in _UNSIGNED:
        return b.convert(_truth(b, x), x.dtype)
    return b.unary("sign", x)


@emits("abs")
def _abs(b: FunctionBuilder, result: TensorType, x: Val) -> Val:
    if x.dtype in _UNSIGNED:
        return x  # StableHLO's abs takes signed types only; unsigned values are their own magnitude
    return b.unary("abs", x)


@emits("atan")
def _atan(b: FunctionBuilder, result: TensorType, x: Val) -> Val:
    return b.binary("atan2", x, b.full(1, x.type))


@emits("isnan")
def _isnan(b: FunctionBuilder, result: TensorType, x: Val) -> Val:
    return b.compare("NE", x, x)


@emits("isinf")
def _isinf(b: FunctionBuilder, result: TensorType, x: Val) -> Val:
    return b.compare("EQ", b.unary("abs", x), b.full(float("inf"), x.type))


#: float type -> the signed integer of its width, for reading the sign bit
_BITS = {DType.f16: DType.i16, DType.bf16: DType.i16, DType.f32: DType.i32, DType.f64: DType.i64}


@emits("signbit")
def _signbit(b: FunctionBuilder, result: TensorType, x: Val) -> Val:
    """The sign bit itself (true for -0.0 and negative NaNs), read as a negative integer."""
    as_int = b.op("stablehlo.bitcast_convert", [x], TensorType(x.shape, _BITS[x.dtype]))
    return b.compare("LT", as_int, b.full(0, as_int.type))


def _negative(b: FunctionBuilder, x: Val) -> Val:
    return b.compare("LT", x, b.full(0, x.type))


@emits("remainder")
def _remainder(b: FunctionBuilder, result: TensorType, x: Val, y: Val) -> Val:
    """NumPy's (Python's) modulo: C's ``fmod``, moved by one divisor when the signs differ."""
    r = b.binary("remainder", x, y)
    if x.dtype in _UNSIGNED:
        return r
    nonzero = b.compare("NE", r, b.full(0, r.type))
    signs_differ = b.compare("NE", _negative(b, r), _negative(b, y))
    fix = b.op("stablehlo.and", [nonzero, signs_differ], nonzero.type)
    return b.select(fix, b.binary("add", r, y), r)


@emits("floor_divide")
def _floor_divide(b: FunctionBuilder, result: TensorType, x: Val, y: Val) -> Val:
    if not x.dtype.is_float:
        q = b.binary("divide", x, y)  # truncates toward zero
        if x.dtype in _UNSIGNED:
            return q
        r = b.binary("remainder", x, y)
        nonzero = b.compare("NE", r, b.full(0, r.type))
        signs_differ = b.compare("NE", _negative(b, r), _negative(b, y))
        fix = b.op("stablehlo.and", [nonzero, signs_differ], nonzero.type)
        return b.select(fix, b.binary("subtract", q, b.full(1, q.type)), q)
    # NumPy's float floor division (npy_divmod): from fmod, so that x == q*y + mod holds exactly
    mod = b.binary("remainder", x, y)
    div = b.binary("divide", b.binary("subtract", x, mod), y)
    nonzero = b.compare("NE", mod, b.full(0, mod.type))
    signs_differ = b.compare("NE", _negative(b, mod), _negative(b, y))
    div = b.select(
        b.op("stablehlo.and", [nonzero, signs_differ], nonzero.type),
        b.binary("subtract", div, b.full(1, div.type)),
        div,
    )
    floor = b.unary("floor", div)
    floor = b.select(
        b.compare("GT", b.binary("subtract", div, floor), b.full(0.5, div.type)),
        b.binary("add", floor, b.full(1, floor.type)),
        floor,
    )
    # a zero quotient keeps the sign of the true quotient; division by zero is x / y
    quotient = b.binary("divide", x, y)
    signed_zero = b.op("stablehlo.multiply", [b.full(0, div.type), quotient], div.type)
    floor = b.select(b.compare("EQ", div, b.full(0, div.type)), signed_zero, floor)
    return b.select(b.compare("EQ", y, b.full(0, y.type)), quotient, floor)


@emits("select")
def _select(b: FunctionBuilder, result: TensorType, pred: Val, x: Val, y: Val) -> Val:
    return b.select(pred, x, y)


@emits("convert")
def _convert(b: FunctionBuilder, result: TensorType, x: Val, *, dtype: DType) -> Val:
    if dtype is DType.bool:
        return _truth(b, x)
    return b.convert(x, dtype)
