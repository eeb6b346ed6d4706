"""Elementwise math: unary functions, arithmetic, comparisons, logic, ``where`` and ``clamp``.

The ops are listed in tables and registered by two rule factories, because they differ only in
the ``knp`` function they call: arithmetic computes in torch's opmath (``opmath.opmath``, so
half floats round once and scalars keep their precision), predicates compare the operands in
their promoted dtype and return bool. ``ctx.out_dtype`` is torch's promotion result, so one rule
serves an op's ``Tensor`` and ``Scalar`` overloads alike.
"""

from __future__ import annotations

import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .opmath import opmath
from .rules import RULES

aten = torch.ops.aten


def _arith(name: str, fn):
    def rule(ctx, *args):
        return opmath(ctx.out_dtype, fn, *args)

    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"``{name}`` computed in torch's opmath dtype, rounded once to the result dtype."
    return rule


def _predicate(name: str, fn):
    def rule(ctx, *args):
        return knp.astype(fn(*args), ctx.out_dtype)

    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"``{name}`` over the operands in their promoted dtype."
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


_UNARY = {
    "abs": ((aten.abs.default,), knp.abs),
    "acos": ((aten.acos.default,), knp.arccos),
    "acosh": ((aten.acosh.default,), knp.arccosh),
    "asin": ((aten.asin.default,), knp.arcsin),
    "asinh": ((aten.asinh.default,), knp.arcsinh),
    "atan": ((aten.atan.default,), knp.arctan),
    "atanh": ((aten.atanh.default,), knp.arctanh),
    "ceil": ((aten.ceil.default,), knp.ceil),
    "cos": ((aten.cos.default,), knp.cos),
    "cosh": ((aten.cosh.default,), knp.cosh),
    "erf": ((aten.erf.default,), knp.erf),
    "exp": ((aten.exp.default,), knp.exp),
    "exp2": ((aten.exp2.default,), knp.exp2),
    "expm1": ((aten.expm1.default,), knp.expm1),
    "floor": ((aten.floor.default,), knp.floor),
    "log": ((aten.log.default,), knp.log),
    "log10": ((aten.log10.default,), knp.log10),
    "log1p": ((aten.log1p.default,), knp.log1p),
    "log2": ((aten.log2.default,), knp.log2),
    "neg": ((aten.neg.default,), knp.negative),
    "reciprocal": ((aten.reciprocal.default,), _reciprocal),
    "round": ((aten.round.default,), knp.round),
    "rsqrt": ((aten.rsqrt.default,), knp.rsqrt),
    "sigmoid": ((aten.sigmoid.default,), knp.sigmoid),
    "sign": ((aten.sign.default,), _sign),
    "sin": ((aten.sin.default,), knp.sin),
    "sinh": ((aten.sinh.default,), knp.sinh),
    "sqrt": ((aten.sqrt.default,), knp.sqrt),
    "tan": ((aten.tan.default,), knp.tan),
    "tanh": ((aten.tanh.default,), knp.tanh),
    "trunc": ((aten.trunc.default,), knp.trunc),
}

_BINARY = {
    "pow": ((aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar), knp.power),
    "maximum": ((aten.maximum.default,), knp.maximum),
    "minimum": ((aten.minimum.default,), knp.minimum),
    "remainder": ((aten.remainder.Tensor, aten.remainder.Scalar), knp.remainder),
    "fmod": ((aten.fmod.Tensor, aten.fmod.Scalar), knp.fmod),
    "atan2": ((aten.atan2.default,), knp.arctan2),
    "bitwise_and": ((aten.bitwise_and.Tensor, aten.bitwise_and.Scalar), knp.bitwise_and),
    "bitwise_or": ((aten.bitwise_or.Tensor, aten.bitwise_or.Scalar), knp.bitwise_or),
    "bitwise_xor": ((aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar), knp.bitwise_xor),
}

_PREDICATES = {
    "eq": ((aten.eq.Tensor, aten.eq.Scalar), knp.equal),
    "ne": ((aten.ne.Tensor, aten.ne.Scalar), knp.not_equal),
    "lt": ((aten.lt.Tensor, aten.lt.Scalar), knp.less),
    "le": ((aten.le.Tensor, aten.le.Scalar), knp.less_equal),
    "gt": ((aten.gt.Tensor, aten.gt.Scalar), knp.greater),
    "ge": ((aten.ge.Tensor, aten.ge.Scalar), knp.greater_equal),
    "logical_and": ((aten.logical_and.default,), knp.logical_and),
    "logical_or": ((aten.logical_or.default,), knp.logical_or),
    "logical_xor": ((aten.logical_xor.default,), knp.logical_xor),
    "logical_not": ((aten.logical_not.default,), knp.logical_not),
    "bitwise_not": ((aten.bitwise_not.default,), knp.bitwise_not),
    "isnan": ((aten.isnan.default,), knp.isnan),
    "isinf": ((aten.isinf.default,), knp.isinf),
}

for _table, _factory in ((_UNARY, _arith), (_BINARY, _arith), (_PREDICATES, _predicate)):
    for _name, (_ops, _fn) in _table.items():
        RULES.register(*_ops)(_factory(_name, _fn))


@RULES.register(aten.add.Tensor, aten.add.Scalar)
def add(ctx, x, other, alpha=1):
    if ctx.out_dtype is DType.bool:  # torch adds booleans as `or`
        return knp.logical_or(x, other)
    return opmath(ctx.out_dtype, lambda a, b: knp.add(a, b if alpha == 1 else knp.multiply(b, alpha)), x, other)


@RULES.register(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx, x, other):
    if ctx.out_dtype is DType.bool:  # and multiplies them as `and`
        return knp.logical_and(x, other)
    return opmath(ctx.out_dtype, knp.multiply, x, other)


@RULES.register(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx, x, other, alpha=1):
    return opmath(ctx.out_dtype, lambda a, b: knp.subtract(a, b if alpha == 1 else knp.multiply(b, alpha)), x, other)


_ROUNDING = {None: knp.divide, "trunc": _trunc_divide, "floor": knp.floor_divide}


@RULES.register(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode)
def div(ctx, x, other, *, rounding_mode=None):
    return opmath(ctx.out_dtype, _ROUNDING[rounding_mode], x, other)


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


@RULES.register(aten.where.self)
def where(ctx, condition, x, other):
    return knp.where(condition, knp.astype(x, ctx.out_dtype), knp.astype(other, ctx.out_dtype))
