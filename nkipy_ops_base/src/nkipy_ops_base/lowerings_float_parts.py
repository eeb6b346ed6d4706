"""A float's parts: ``frexp`` (mantissa and exponent), ``ldexp`` (scale by a power of two) and
``nextafter`` (the neighbouring representable value).

The IR has no bit casts, so the parts are found arithmetically and made exact by construction:

* ``2**e`` for an integer ``e`` is a product of the constants ``2**(±2**b)`` for the bits ``b``
  of ``|e|`` (``_power_of_two``); every partial product is a power of two between 1 and the
  result, so each multiplication is exact (subnormal powers of two included), and an exponent
  past the dtype's range gives ``inf`` or ``0`` as the true value would.
* ``frexp``: ``e = floor(log2|x|) + 1`` from the (inexact) logarithm, then
  ``m = x · 2**-e``; one correction step each way brings ``|m|`` into ``[0.5, 1)``, so an
  off-by-one logarithm near a power of two does not matter. Half floats are computed in f32,
  where their subnormals are normal; the mantissa then fits the half float exactly.
* ``nextafter(x, y)`` steps ``x`` by one unit in the last place of the target dtype:
  ``2**(e - p)`` away from zero (``p`` significand bits), half that towards zero from an exact
  power of two, and at least the smallest subnormal. The sum is exactly representable, so
  computing it in f32 for half floats and rounding once is exact too; past the largest finite
  value it rounds to ``inf``, as the neighbour is.

``ldexp`` is torch's ``x · pow(2, other)``: it overflows where torch does (``2**other`` first).
Results are exact: they equal torch's bit for bit (zeros, infinities and NaNs included:
``frexp`` of those returns them with exponent 0, as glibc's ``frexp`` that torch calls does).
"""

from __future__ import annotations

import math

import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .opmath import compute_dtype, opmath
from .rules import RULES

aten = torch.ops.aten


def _power_of_two(e, dtype: DType):
    """Exact ``2**e`` in ``dtype`` (f32 or f64) for an integer tensor ``e`` (see the module)."""
    bits = 11 if dtype is DType.f64 else 8  # |e| up to 2047 or 255: past each range's ends
    magnitude = knp.abs(e)
    negative = knp.less(e, 0)
    result = knp.ones(e.shape, dtype)
    for b in range(bits):
        k = 2**b
        up = math.inf if k >= 1024 else math.ldexp(1.0, k)
        factor = knp.where(
            negative, knp.full((), math.ldexp(1.0, -k), dtype), knp.full((), up, dtype)
        )
        bit = knp.equal(knp.remainder(knp.floor_divide(magnitude, k), 2), 1)
        result = knp.where(bit, knp.multiply(result, factor), result)
    return result


def _regular(x):
    """Where ``x`` is finite and nonzero (the values with a mantissa and an exponent)."""
    return knp.logical_not(
        knp.logical_or(knp.equal(x, 0), knp.logical_or(knp.isnan(x), knp.isinf(x)))
    )


def _frexp(x):
    """``(m, e)`` with ``x = m · 2**e``, ``|m|`` in ``[0.5, 1)`` and int32 ``e`` where ``x`` (of a
    compute dtype) is finite and nonzero; ``(x, 0)`` elsewhere."""
    dtype = knp.dtype_of(x)
    regular = _regular(x)
    safe = knp.where(regular, x, knp.full((), 1, dtype))
    e = knp.astype(knp.add(knp.floor(knp.log2(knp.abs(safe))), 1), DType.i32)
    half = knp.floor_divide(e, 2)  # two factors, each within the dtype's range
    m = knp.multiply(
        knp.multiply(safe, _power_of_two(knp.negative(half), dtype)),
        _power_of_two(knp.subtract(half, e), dtype),
    )
    for too_big in (True, False):
        size = knp.abs(m)
        fix = knp.greater_equal(size, 1) if too_big else knp.less(size, 0.5)
        m = knp.where(fix, knp.multiply(m, 0.5 if too_big else 2), m)
        e = knp.where(fix, knp.add(e, 1 if too_big else -1), e)
    return knp.where(regular, m, x), knp.where(regular, e, 0)


@RULES.register(aten.frexp.Tensor)
def frexp(ctx, x):
    mantissa, exponent = _frexp(knp.astype(x, compute_dtype(knp.dtype_of(x))))
    return knp.astype(mantissa, ctx.out[0].dtype), knp.astype(exponent, ctx.out[1].dtype)


@RULES.register(aten.ldexp.Tensor)
def ldexp(ctx, x, other):
    return opmath(ctx.out_dtype, lambda a, b: knp.multiply(a, knp.power(2.0, b)), x, other)


@RULES.register(aten.nextafter.default)
def nextafter(ctx, x, other):
    """The representable value of ``x``'s dtype next to ``x`` in the direction of ``other``
    (``other`` itself where they are equal; NaN where either is)."""
    dtype = ctx.out_dtype
    info = torch.finfo(dtype.torch)
    digits = 2 - math.frexp(info.eps)[1]  # eps = 2**(1 - digits) = 0.5 · 2**(2 - digits)
    compute = compute_dtype(dtype)
    a, b = knp.astype(x, compute), knp.astype(other, compute)
    smallest = knp.full((), info.smallest_normal * info.eps, compute)
    m, e = _frexp(a)
    away = knp.maximum(_power_of_two(knp.subtract(e, digits), compute), smallest)
    towards_zero = knp.where(
        knp.equal(knp.abs(m), 0.5), knp.maximum(knp.multiply(away, 0.5), smallest), away
    )
    increase = knp.greater(b, a)
    step = knp.where(knp.equal(knp.greater(a, 0), increase), away, towards_zero)
    result = knp.where(increase, knp.add(a, step), knp.subtract(a, step))
    result = knp.where(
        knp.equal(a, 0), knp.where(increase, smallest, knp.negative(smallest)), result
    )
    result = knp.where(knp.isinf(a), knp.multiply(knp.sign(a), info.max), result)
    result = knp.where(knp.equal(a, b), b, result)
    result = knp.where(knp.logical_or(knp.isnan(a), knp.isnan(b)), math.nan, result)
    return knp.astype(result, dtype)
