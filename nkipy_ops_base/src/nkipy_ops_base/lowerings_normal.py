"""Functions of the normal distribution: ``special_ndtri`` (its quantile) and
``special_erfcx`` (``exp(x²) erfc(x)``, through which torch decomposes ``special_log_ndtr``).

- ``ndtri``: Cephes' rational approximations (Moshier, *Methods and Programs for Mathematical
  Functions*, 1989; coefficients in ``cephes_tables``), as torch's kernel: one in ``y - 1/2``
  for the centre, two in ``1/sqrt(-2 log y)`` for the tails. About 1e-16 relative in f64, a few
  ulps in f32.
- ``erfcx``: torch evaluates S. G. Johnson's table of 100 Chebyshev pieces (Faddeeva package);
  here, with no table lookup, below 3 it is ``exp(x²) erfc(x)`` with ``x²`` split exactly into
  a head and a tail (Dekker's product: ``exp`` of an unrounded square, so the error does not
  grow with ``x²`` as ``exp(x * x)``'s does) and ``erfc`` the primitive; from 3 up, Laplace's
  continued fraction ``1/√π / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))``, 12 terms in f32
  and 30 in f64 (relative truncation error below 5e-9 and 5e-16 at ``x = 3``, smaller above).
  About 2 ulps in f32 and 1e-15 relative in f64; ``+inf`` below -26.7 (the square overflows),
  0 at ``+inf``.
"""

from __future__ import annotations

import math

import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from . import cephes_tables as tables
from .opmath import opmath
from .rules import RULES

aten = torch.ops.aten

_EXP_MINUS_2 = math.exp(-2)
# Veltkamp's splitter 2^s + 1: x * it splits x into a head of half the mantissa and a tail
_SPLITTER = {DType.f32: 4097.0, DType.f64: 134217729.0}
_CONTINUED_FRACTION_TERMS = {DType.f32: 12, DType.f64: 30}


def _ratio(numerator, denominator, z):
    return knp.divide(knp.polyval(numerator, z), knp.polyval(denominator, z))


def _ndtri(y0):
    """``Φ⁻¹(y)``: ``∓inf`` at 0 and 1, NaN outside [0, 1]."""
    upper = knp.greater(y0, 1 - _EXP_MINUS_2)
    y = knp.where(upper, knp.subtract(1, y0), y0)
    centred = knp.subtract(y, 0.5)
    c2 = knp.multiply(centred, centred)
    central = knp.multiply(
        knp.add(
            centred,
            knp.multiply(centred, knp.multiply(c2, _ratio(tables.NDTRI_P0, tables.NDTRI_Q0, c2))),
        ),
        math.sqrt(2 * math.pi),
    )
    x = knp.sqrt(knp.multiply(knp.log(y), -2))
    z = knp.divide(1, x)
    correction = knp.multiply(
        z,
        knp.where(
            knp.less(x, 8),
            _ratio(tables.NDTRI_P1, tables.NDTRI_Q1, z),
            _ratio(tables.NDTRI_P2, tables.NDTRI_Q2, z),
        ),
    )
    tail = knp.subtract(knp.subtract(x, knp.divide(knp.log(x), x)), correction)
    tail = knp.where(upper, tail, knp.negative(tail))
    result = knp.where(knp.greater(y, _EXP_MINUS_2), central, tail)
    result = knp.where(knp.logical_or(knp.less(y0, 0), knp.greater(y0, 1)), math.nan, result)
    result = knp.where(knp.equal(y0, 0), -math.inf, result)
    return knp.where(knp.equal(y0, 1), math.inf, result)


def _exp_square(x):
    """``exp(x²)`` without rounding ``x²`` first: ``x = h + t`` with ``h`` of half the
    mantissa, so ``h²`` is exact and ``exp(x²) = exp(h²) exp(t (2h + t))``."""
    scaled = knp.multiply(x, _SPLITTER[knp.dtype_of(x)])
    head = knp.subtract(scaled, knp.subtract(scaled, x))
    tail = knp.subtract(x, head)
    return knp.multiply(
        knp.exp(knp.multiply(head, head)),
        knp.exp(knp.multiply(tail, knp.add(knp.multiply(head, 2), tail))),
    )


def _erfcx(x):
    near = knp.multiply(_exp_square(x), knp.erfc(x))
    denominator = x
    for k in range(_CONTINUED_FRACTION_TERMS[knp.dtype_of(x)], 0, -1):
        denominator = knp.add(x, knp.divide(k / 2, denominator))
    far = knp.divide(1 / math.sqrt(math.pi), denominator)
    result = knp.where(knp.less(x, 3), near, far)
    return knp.where(knp.less(x, -26.7), math.inf, result)


@RULES.register(aten.special_ndtri.default)
def ndtri(ctx, y):
    return opmath(ctx.out_dtype, _ndtri, y)


@RULES.register(aten.special_erfcx.default)
def erfcx(ctx, x):
    return opmath(ctx.out_dtype, _erfcx, x)
