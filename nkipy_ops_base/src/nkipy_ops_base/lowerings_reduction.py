"""Reductions and scans: sums, means, products, extrema (with their indices), ``any``, variance,
vector norms, ``cumsum`` and ``cumprod``.

ATen spells "all dimensions" as ``dim=None`` or ``dim=[]``; ``conventions.axes`` turns either
into explicit axes. Half floats accumulate in f32 and round once (the ``reduce`` primitive and
``knp.mean`` do this), integer and bool sums and products widen to i64 as in torch; the result
is cast to ``ctx.out_dtype``, which also covers an explicit ``dtype=`` argument.
"""

from __future__ import annotations

import math

import torch

from nkipy_core import knp

from . import complex_pairs
from .conventions import axes
from .opmath import opmath, upcast
from .rules import RULES

aten = torch.ops.aten


@RULES.register(aten.sum.dim_IntList, complex=True)
def sum_(ctx, x, dim=None, keepdim=False, *, dtype=None):
    """A complex sum adds the real and imaginary parts apart (over torch's dims, not the pair's)."""
    if ctx.complex:
        x = complex_pairs.operand(ctx, x, 0)
        return knp.sum(x, axes(dim, x.ndim - 1), keepdim)
    return knp.astype(knp.sum(x, axes(dim, x.ndim), keepdim, dtype), ctx.out_dtype)


@RULES.register(aten.mean.dim, aten.mean.default, complex=True)
def mean(ctx, x, dim=None, keepdim=False, *, dtype=None):
    """A complex mean averages the real and imaginary parts apart."""
    if ctx.complex:
        x = complex_pairs.operand(ctx, x, 0)
        return knp.mean(x, axes(dim, x.ndim - 1), keepdim, dtype=ctx.out_dtype)
    return knp.mean(x, axes(dim, x.ndim), keepdim, dtype=ctx.out_dtype)


@RULES.register(aten.prod.default, aten.prod.dim_int)
def prod(ctx, x, dim=None, keepdim=False, *, dtype=None):
    return knp.astype(knp.prod(x, axes(dim, x.ndim), keepdim, dtype), ctx.out_dtype)


@RULES.register(aten.amax.default, aten.max.default)
def amax(ctx, x, dim=(), keepdim=False):
    return knp.max(x, axes(dim, x.ndim), keepdim)


@RULES.register(aten.amin.default, aten.min.default)
def amin(ctx, x, dim=(), keepdim=False):
    return knp.min(x, axes(dim, x.ndim), keepdim)


def _argreduce(fn, x, dim, keepdim):
    """Index of the first extreme along ``dim`` (of the flattened tensor if ``None``)."""
    if x.ndim == 0:
        return knp.zeros((), torch.int64)
    if dim is None and keepdim:
        return knp.reshape(fn(x), (1,) * x.ndim)
    return fn(x, dim, keepdim)


@RULES.register(aten.max.dim)
def max_dim(ctx, x, dim, keepdim=False):
    return knp.max(x, axes(dim, x.ndim), keepdim), _argreduce(knp.argmax, x, dim, keepdim)


@RULES.register(aten.min.dim)
def min_dim(ctx, x, dim, keepdim=False):
    return knp.min(x, axes(dim, x.ndim), keepdim), _argreduce(knp.argmin, x, dim, keepdim)


@RULES.register(aten.argmax.default)
def argmax(ctx, x, dim=None, keepdim=False):
    return _argreduce(knp.argmax, x, dim, keepdim)


@RULES.register(aten.argmin.default)
def argmin(ctx, x, dim=None, keepdim=False):
    return _argreduce(knp.argmin, x, dim, keepdim)


@RULES.register(aten.any.default, aten.any.dim, aten.any.dims)
def any_(ctx, x, dim=None, keepdim=False):
    return knp.astype(knp.any(x, axes(dim, x.ndim), keepdim), ctx.out_dtype)


def _var_mean(ctx, x, dim, correction, keepdim):
    """``sum((x - mean)²) / max(N - correction, 0)`` and the mean, two-pass in opmath."""
    dtype = ctx.out_dtype
    x = upcast(x, dtype)
    reduced = axes(dim, x.ndim)
    count = math.prod(x.shape[a] for a in reduced)
    mean = knp.mean(x, reduced, keepdims=True)
    centered = knp.subtract(x, mean)
    var = knp.divide(
        knp.sum(knp.multiply(centered, centered), reduced, keepdim), max(count - correction, 0)
    )
    return knp.astype(var, dtype), knp.astype(
        mean if keepdim else knp.squeeze(mean, reduced), dtype
    )


@RULES.register(aten.var.correction)
def var(ctx, x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(ctx, x, dim, 1 if correction is None else correction, keepdim)[0]


@RULES.register(aten.var.dim)
def var_dim(ctx, x, dim, unbiased=True, keepdim=False):
    return _var_mean(ctx, x, dim, int(unbiased), keepdim)[0]


@RULES.register(aten.var_mean.correction)
def var_mean(ctx, x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(ctx, x, dim, 1 if correction is None else correction, keepdim)


@RULES.register(aten.cumsum.default)
def cumsum(ctx, x, dim, *, dtype=None):
    return knp.cumsum(x, dim, dtype=ctx.out_dtype) if x.ndim else knp.astype(x, ctx.out_dtype)


@RULES.register(aten.cumprod.default)
def cumprod(ctx, x, dim, *, dtype=None):
    return knp.cumprod(x, dim, dtype=ctx.out_dtype) if x.ndim else knp.astype(x, ctx.out_dtype)


def p_norm(v, ord, reduced, keepdim=False):  # noqa: A002 - ATen's name
    """``(sum |v|^ord)^(1/ord)`` over ``reduced``, with ATen's special orders: 0 counts nonzeros,
    ±inf are the largest/smallest magnitudes."""
    if ord == 0:
        return knp.astype(knp.sum(knp.not_equal(v, 0), reduced, keepdim), knp.dtype_of(v))
    if ord in (math.inf, -math.inf):
        return (knp.max if ord > 0 else knp.min)(knp.abs(v), reduced, keepdim)
    if ord == 1:
        return knp.sum(knp.abs(v), reduced, keepdim)
    if ord == 2:
        return knp.sqrt(knp.sum(knp.multiply(v, v), reduced, keepdim))
    return knp.power(knp.sum(knp.power(knp.abs(v), ord), reduced, keepdim), 1 / ord)


@RULES.register(aten.linalg_vector_norm.default)
def vector_norm(ctx, x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002 - ATen's name
    return opmath(ctx.out_dtype, lambda v: p_norm(v, ord, axes(dim, v.ndim), keepdim), x)
