"""Elementwise math: unary functions, arithmetic, comparisons, logic, ``where`` and ``clamp``.

The ops are listed in tables and registered by two rule factories, because they differ only in
the ``knp`` function they call: arithmetic computes in torch's opmath (``opmath.opmath``, so
half floats round once and Python scalars are rounded or kept as torch's kernel does),
predicates compare the operands in their promoted dtype and return bool. ``ctx.out_dtype`` is
torch's promotion result, so one rule serves an op's ``Tensor`` and ``Scalar`` overloads alike.
"""

from __future__ import annotations

import torch

from nkipy_core import _torch, knp
from nkipy_core.ir import DType

from . import complex_pairs
from .conventions import require
from .opmath import is_scalar, opmath
from .rules import RULES

aten = torch.ops.aten


def _arith(fn, op):
    def rule(ctx, *args):
        return opmath(ctx.out_dtype, fn, *args)

    return _named(rule, op, "computed in torch's opmath dtype, rounded once to the result dtype")


def _predicate(fn, op):
    def rule(ctx, *args):
        return knp.astype(fn(*args), ctx.out_dtype)

    return _named(rule, op, "over the operands in their promoted dtype")


def _named(rule, op, how: str):
    rule.__name__ = rule.__qualname__ = _torch.schema(op).name.split("::")[-1]
    rule.__doc__ = f"``{rule.__name__}`` {how}."
    return rule


def _sign(x):
    return x if knp.dtype_of(x) is DType.bool else knp.sign(x)


def _reciprocal(x):
    return knp.divide(1, x)


def _trunc_divide(a, b):
    """Division rounded toward zero; integers adjust floor division where the signs differ."""
    if knp.result_type(a, b).is_float:
        return knp.trunc(knp.divide(a, b))
    q = knp.floor_divide(a, b)
    inexact = knp.not_equal(knp.remainder(a, b), 0)
    signs_differ = knp.not_equal(knp.less(a, 0), knp.less(b, 0))
    return knp.where(knp.logical_and(inexact, signs_differ), knp.add(q, 1), q)


def _maximum(a, b):
    """``maximum``; of booleans, ``or`` (torch orders ``False < True``; the IR's ``maximum``
    takes numbers only)."""
    if knp.dtype_of(a) == DType.bool:
        return knp.logical_or(a, b)
    return knp.maximum(a, b)


def _minimum(a, b):
    if knp.dtype_of(a) == DType.bool:
        return knp.logical_and(a, b)
    return knp.minimum(a, b)


def _fmax(a, b):
    """``maximum`` that ignores a NaN operand (NaN only if both are)."""
    if knp.dtype_of(a) == DType.bool:
        return _maximum(a, b)
    return knp.where(knp.isnan(b), a, knp.where(knp.isnan(a), b, knp.maximum(a, b)))


def _fmin(a, b):
    if knp.dtype_of(a) == DType.bool:
        return _minimum(a, b)
    return knp.where(knp.isnan(b), a, knp.where(knp.isnan(a), b, knp.minimum(a, b)))


#: (knp function, overloads it lowers); the rule is named after the ATen op
_UNARY = [
    (knp.arccos, aten.acos.default),
    (knp.arccosh, aten.acosh.default),
    (knp.arcsin, aten.asin.default),
    (knp.arcsinh, aten.asinh.default),
    (knp.arctan, aten.atan.default),
    (knp.arctanh, aten.atanh.default),
    (knp.ceil, aten.ceil.default),
    (knp.cos, aten.cos.default),
    (knp.cosh, aten.cosh.default),
    (knp.erf, aten.erf.default),
    (knp.exp, aten.exp.default),
    (knp.exp2, aten.exp2.default),
    (knp.expm1, aten.expm1.default),
    (knp.floor, aten.floor.default),
    (knp.log, aten.log.default),
    (knp.log10, aten.log10.default),
    (knp.log1p, aten.log1p.default),
    (knp.log2, aten.log2.default),
    (_reciprocal, aten.reciprocal.default),
    (knp.round, aten.round.default),
    (knp.rsqrt, aten.rsqrt.default),
    (knp.sigmoid, aten.sigmoid.default),
    (_sign, aten.sign.default),
    (knp.sin, aten.sin.default),
    (knp.sinh, aten.sinh.default),
    (knp.sqrt, aten.sqrt.default),
    (knp.tan, aten.tan.default),
    (knp.tanh, aten.tanh.default),
    (knp.trunc, aten.trunc.default),
]

_BINARY = [
    (_maximum, aten.maximum.default),
    (_minimum, aten.minimum.default),
    (_fmax, aten.fmax.default),
    (_fmin, aten.fmin.default),
    (complex_pairs.hypot, aten.hypot.default),
    (knp.remainder, aten.remainder.Tensor, aten.remainder.Scalar),
    (knp.fmod, aten.fmod.Tensor, aten.fmod.Scalar),
    (knp.arctan2, aten.atan2.default),
    (knp.bitwise_and, aten.bitwise_and.Tensor, aten.bitwise_and.Scalar),
    (knp.bitwise_or, aten.bitwise_or.Tensor, aten.bitwise_or.Scalar),
    (knp.bitwise_xor, aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar),
]

_PREDICATES = [
    (knp.less, aten.lt.Tensor, aten.lt.Scalar),
    (knp.less_equal, aten.le.Tensor, aten.le.Scalar),
    (knp.greater, aten.gt.Tensor, aten.gt.Scalar),
    (knp.greater_equal, aten.ge.Tensor, aten.ge.Scalar),
    (knp.logical_and, aten.logical_and.default),
    (knp.logical_or, aten.logical_or.default),
    (knp.logical_xor, aten.logical_xor.default),
    (knp.logical_not, aten.logical_not.default),
    (knp.bitwise_not, aten.bitwise_not.default),
    (knp.isnan, aten.isnan.default),
    (knp.isinf, aten.isinf.default),
]

#: ops of the tables that complex tensors have too: the ``complex_pairs`` function computing them
_COMPLEX = {
    aten.exp.default: complex_pairs.exp,
    aten.log.default: complex_pairs.log,
    aten.reciprocal.default: complex_pairs.reciprocal,
    aten.sigmoid.default: complex_pairs.sigmoid,
}


def _or_complex(real_rule, fn):
    """``real_rule``, or ``fn`` of the pairs for a complex node."""

    def rule(ctx, x):
        return fn(complex_pairs.operand(ctx, x, 0)) if ctx.complex else real_rule(ctx, x)

    rule.__name__ = rule.__qualname__ = real_rule.__name__
    rule.__doc__ = f"{real_rule.__doc__} Complex tensors: ``complex_pairs.{fn.__name__}``."
    return rule


for _table, _factory in ((_UNARY, _arith), (_BINARY, _arith), (_PREDICATES, _predicate)):
    for _fn, *_ops in _table:
        _rule = _factory(_fn, _ops[0])
        if _ops[0] in _COMPLEX:
            _rule = _or_complex(_rule, _COMPLEX[_ops[0]])
        RULES.register(*_ops, complex=_ops[0] in _COMPLEX)(_rule)


def _parts_compared(fn, combine, op):
    """``fn`` of the operands; complex ones (pairs, a real operand with a zero imaginary part)
    compared part by part, the two answers joined by ``combine``."""
    real_rule = _predicate(fn, op)

    def rule(ctx, x, other):
        if not ctx.complex:
            return real_rule(ctx, x, other)
        which = 0 if complex_pairs.arg_is_complex(ctx, 0) else 1
        dtype = knp.dtype_of((x, other)[which])
        a, b = (
            complex_pairs.pair(v, complex_pairs.arg_is_complex(ctx, i), dtype)
            for i, v in enumerate((x, other))
        )
        parts = fn(a, b)
        return combine(parts[..., complex_pairs.REAL], parts[..., complex_pairs.IMAG])

    return _named(rule, op, "over the operands in their promoted dtype; complex ones part by part")


_REAL_POW = _arith(knp.power, aten.pow.Tensor_Tensor)


@RULES.register(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar, complex=True)
def pow_(ctx, x, exponent):
    """In torch's opmath; complex powers by ``complex_pairs.power``."""
    if not ctx.complex:
        return _REAL_POW(ctx, x, exponent)
    scalar = exponent if is_scalar(exponent) else None
    base, exponent = complex_pairs.operand(ctx, x, 0), complex_pairs.operand(ctx, exponent, 1)
    return complex_pairs.power(base, exponent, scalar)


RULES.register(aten.eq.Tensor, aten.eq.Scalar, complex=True)(
    _parts_compared(knp.equal, knp.logical_and, aten.eq.Tensor)
)
RULES.register(aten.ne.Tensor, aten.ne.Scalar, complex=True)(
    _parts_compared(knp.not_equal, knp.logical_or, aten.ne.Tensor)
)


def _scaled(ctx, fn, x, other, alpha):
    """``fn(x, alpha * other)``, the ``alpha`` form of ``add`` and ``sub``: ``alpha`` is rounded
    to the result dtype like the operands, and the product is not rounded on its own."""
    if alpha == 1:
        return opmath(ctx.out_dtype, fn, x, other)
    return opmath(ctx.out_dtype, lambda a, b, s: fn(a, knp.multiply(b, s)), x, other, alpha)


def _complex_scaled(ctx, fn, x, other, alpha):
    """``fn(x, alpha * other)`` of complex operands (``alpha`` real or complex)."""
    x, other = complex_pairs.operand(ctx, x, 0), complex_pairs.operand(ctx, other, 1)
    if alpha != 1:
        other = complex_pairs.multiply(other, complex_pairs.pair(alpha, False, ctx.out_dtype))
    return fn(x, other)


@RULES.register(aten.add.Tensor, aten.add.Scalar, complex=True)
def add(ctx, x, other, alpha=1):
    if ctx.complex:
        return _complex_scaled(ctx, knp.add, x, other, alpha)
    if ctx.out_dtype is DType.bool:  # torch adds booleans as `or`
        return knp.logical_or(x, other)
    return _scaled(ctx, knp.add, x, other, alpha)


@RULES.register(aten.mul.Tensor, aten.mul.Scalar, complex=True)
def mul(ctx, x, other):
    """A scalar ``other`` multiplies at f32 without being rounded to a half dtype first."""
    if ctx.complex:
        return complex_pairs.multiply(
            complex_pairs.operand(ctx, x, 0), complex_pairs.operand(ctx, other, 1)
        )
    if ctx.out_dtype is DType.bool:  # and multiplies them as `and`
        return knp.logical_and(x, other)
    return opmath(ctx.out_dtype, knp.multiply, x, other, unrounded_at=(1,))


@RULES.register(aten.sub.Tensor, aten.sub.Scalar, complex=True)
def sub(ctx, x, other, alpha=1):
    if ctx.complex:
        return _complex_scaled(ctx, knp.subtract, x, other, alpha)
    return _scaled(ctx, knp.subtract, x, other, alpha)


@RULES.register(aten.neg.default, complex=True)
def neg(ctx, x):
    """Both parts of a complex number negated."""
    return knp.negative(x) if ctx.complex else opmath(ctx.out_dtype, knp.negative, x)


@RULES.register(aten.abs.default, complex=True)
def abs_(ctx, x):
    """A complex number's magnitude (``complex_pairs.magnitude``)."""
    return complex_pairs.magnitude(x) if ctx.complex else opmath(ctx.out_dtype, knp.abs, x)


def _half_floor_divide(a, b):
    """torch's vectorised floor division (``div_floor_floating_vec``) on half-float operands,
    every step rounded to their dtype as ``Vectorized<Half>`` rounds it."""
    mod = knp.fmod(a, b)
    quotient = knp.divide(knp.subtract(a, mod), b)
    borrow = knp.logical_and(knp.not_equal(mod, 0), knp.not_equal(knp.less(b, 0), knp.less(mod, 0)))
    quotient = knp.where(borrow, knp.subtract(quotient, 1), quotient)
    floored = knp.floor(quotient)
    floored = knp.where(
        knp.greater(knp.subtract(quotient, floored), 0.5), knp.add(floored, 1), floored
    )
    plain = knp.divide(a, b)
    zero = knp.astype(knp.where(knp.less(plain, 0), -0.0, 0.0), knp.dtype_of(a))
    return knp.where(knp.equal(b, 0), plain, knp.where(knp.equal(quotient, 0), zero, floored))


_ROUNDING = {None: knp.divide, "trunc": _trunc_divide, "floor": knp.floor_divide}
_HALF_ROUNDING = {"trunc": _trunc_divide, "floor": _half_floor_divide}


@RULES.register(
    aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode, complex=True
)
def div(ctx, x, other, *, rounding_mode=None):
    """A scalar ``other`` divides at f32 without being rounded to a half dtype first. A rounding
    division of half floats by a tensor runs in the half type itself: its quotient is rounded
    to the dtype before it is truncated or floored. Complex numbers divide by Smith's algorithm
    (``complex_pairs.divide``; torch has no rounding division of them)."""
    if ctx.complex:
        return complex_pairs.divide(
            complex_pairs.operand(ctx, x, 0), complex_pairs.operand(ctx, other, 1)
        )
    dtype = ctx.out_dtype
    if rounding_mode is not None and dtype.is_half and not is_scalar(other):
        return _HALF_ROUNDING[rounding_mode](knp.astype(x, dtype), knp.astype(other, dtype))
    return opmath(dtype, _ROUNDING[rounding_mode], x, other, unrounded_at=(1,))


# -- optimizer arithmetic: what AdamW and friends call on every parameter at every step --------


def _pointwise_scaled(ctx, combine, x, tensor1, tensor2, value):
    """``x + combine(value * tensor1, tensor2)``, rounded once, as torch's CPU kernels of
    ``addcmul``/``addcdiv`` compute it: ``value`` read at the compute dtype, unrounded."""
    return opmath(
        ctx.out_dtype,
        lambda a, b, c, s: knp.add(a, combine(knp.multiply(s, b), c)),
        x,
        tensor1,
        tensor2,
        value,
        unrounded_at=(3,),
    )


@RULES.register(aten.addcmul.default)
def addcmul(ctx, x, tensor1, tensor2, *, value=1):
    """``x + value * tensor1 * tensor2``, the product taken left to right."""
    require(ctx.out_dtype.is_float, "addcmul of integers (its decomposition runs instead)")
    return _pointwise_scaled(ctx, knp.multiply, x, tensor1, tensor2, value)


@RULES.register(aten.addcdiv.default)
def addcdiv(ctx, x, tensor1, tensor2, *, value=1):
    """``x + value * tensor1 / tensor2``: ``(value * tensor1) / tensor2``, then the sum."""
    require(ctx.out_dtype.is_float, "addcdiv of integers is refused by torch")
    return _pointwise_scaled(ctx, knp.divide, x, tensor1, tensor2, value)


@RULES.register("prims::fma.default")  # by name: its module (torch._inductor) loads with dynamo
def fma(ctx, a, b, c):
    """``a * b + c``, what dynamo writes for ``t.addcmul_(t1, t2, value=v)``
    (``fma(t1 * t2, v, t)``) and ``t.add_(other, alpha=tensor)``: AdamW's and SGD's updates in a
    compiled ``optimizer.step``. As the prim's own implementation computes it, ``b`` (``value``)
    read at the compute dtype, unrounded."""
    require(ctx.out_dtype.is_float, "fma of integers")
    return opmath(
        ctx.out_dtype, lambda x, y, z: knp.add(knp.multiply(x, y), z), a, b, c, unrounded_at=(1,)
    )


@RULES.register(aten.lerp.Scalar)
def lerp(ctx, x, end, weight):
    """``x + weight * (end - x)`` for a small weight (``|weight| < 0.5``), else
    ``end - (end - x) * (1 - weight)``, torch's two forms (each exact at its end point); the
    weight is read at the compute dtype, unrounded."""
    require(ctx.out_dtype.is_float, "lerp of integers")
    if abs(weight) < 0.5:
        return opmath(
            ctx.out_dtype,
            lambda a, b, w: knp.add(a, knp.multiply(w, knp.subtract(b, a))),
            x,
            end,
            weight,
            unrounded_at=(2,),
        )
    return opmath(
        ctx.out_dtype,
        lambda a, b, w: knp.subtract(b, knp.multiply(knp.subtract(b, a), knp.subtract(1, w))),
        x,
        end,
        weight,
        unrounded_at=(2,),
    )


@RULES.register(aten.round.decimals)
def round_decimals(ctx, x, *, decimals):
    scale = 10.0**decimals
    return opmath(ctx.out_dtype, lambda v: knp.divide(knp.round(knp.multiply(v, scale)), scale), x)


@RULES.register(aten.clamp.default, aten.clamp.Tensor)
def clamp(ctx, x, min=None, max=None):  # noqa: A002 - ATen's argument names
    def fn(v, lo, hi):
        v = v if lo is None else knp.maximum(v, lo)
        return v if hi is None else knp.minimum(v, hi)

    return opmath(ctx.out_dtype, fn, x, min, max)


@RULES.register(aten.where.self, complex=True)
def where(ctx, condition, x, other):
    if ctx.complex:  # the condition holds for both parts of a pair
        x, other = complex_pairs.operand(ctx, x, 1), complex_pairs.operand(ctx, other, 2)
        return knp.where(knp.expand_dims(condition, -1), x, other)
    return knp.where(condition, knp.astype(x, ctx.out_dtype), knp.astype(other, ctx.out_dtype))
