"""Scans beyond ``cumsum``/``cumprod``: ``cummax``, ``cummin`` and ``logcumsumexp``.

``cummax``'s values are the ``cumulative`` primitive's running maximum. Its indices follow
torch: the last position that holds the running value (ties go to the later element), and once
a NaN is seen, the latest NaN. A position ``j`` *sets* the running value when ``x[j]`` equals it
(or is NaN); the index at ``i`` is the largest setting ``j <= i``, a running maximum of
``where(sets, j, 0)``.

``logcumsumexp`` is a log-step (Hillis-Steele) scan of ``logaddexp``: ``ceil(log2 n)`` rounds of
"combine with the element ``2^k`` before", each exact to an ulp, so that neither a shared max
(which underflows the early terms) nor ``log(cumsum(exp))`` (which overflows) is needed.
"""

from __future__ import annotations

import math

import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .opmath import opmath
from .rules import RULES

aten = torch.ops.aten


def _positions(shape, axis: int):
    """``0 … n-1`` along ``axis``, broadcast to ``shape``."""
    view = [n if a == axis else 1 for a, n in enumerate(shape)]
    return knp.broadcast_to(knp.reshape(knp.arange(shape[axis]), view), shape)


def _running(x, dim: int, largest: bool):
    if x.ndim == 0:
        return x, knp.zeros((), DType.i64)
    dim %= x.ndim
    values = (knp.cummax if largest else knp.cummin)(x, dim)
    sets = knp.equal(x, values)
    if knp.dtype_of(x).is_float:
        sets = knp.logical_or(sets, knp.isnan(x))
    indices = knp.cummax(knp.where(sets, _positions(x.shape, dim), 0), dim)
    return values, indices


@RULES.register(aten.cummax.default)
def cummax(ctx, x, dim):
    return _running(x, dim, largest=True)


@RULES.register(aten.cummin.default)
def cummin(ctx, x, dim):
    return _running(x, dim, largest=False)


def _logaddexp(a, b):
    """``log(exp(a) + exp(b))``; equal infinities stay themselves and NaN propagates."""
    high, low = knp.maximum(a, b), knp.minimum(a, b)
    spread = knp.add(high, knp.log1p(knp.exp(knp.subtract(low, high))))
    return knp.where(knp.equal(a, b), knp.add(high, math.log(2)), spread)


def _shifted(x, axis: int, step: int, fill: float):
    """``x`` moved ``step`` places later along ``axis``, the first ``step`` places ``fill``."""
    n = x.shape[axis]
    kept = x[(slice(None),) * axis + (slice(0, n - step),)]
    return knp.pad(kept, [(step, 0) if a == axis else (0, 0) for a in range(x.ndim)], fill)


def _logcumsumexp(x, axis: int):
    step = 1
    while step < x.shape[axis]:
        x = _logaddexp(_shifted(x, axis, step, -math.inf), x)
        step *= 2
    return x


@RULES.register(aten.logcumsumexp.default)
def logcumsumexp(ctx, x, dim):
    if x.ndim == 0:
        return knp.astype(x, ctx.out_dtype)
    axis = dim % x.ndim
    return opmath(ctx.out_dtype, lambda v: _logcumsumexp(v, axis), x)
