"""Special functions and sign manipulation: ``erfc``, ``erfinv``, ``lgamma``, ``digamma`` (and
its derivative, ``polygamma`` of order 1), ``signbit``, ``copysign``, and ``atan2``'s ``out=`` form.

``erfc`` and ``signbit`` are primitives (``1 - erf`` cancels to zero in the tail, and the sign
of a NaN or of ``-0.0`` cannot be read without one). The others are composed here, the way XLA's
client library builds its ``Lgamma``, ``Digamma`` and ``ErfInv`` from elementwise ops, so that
the IR keeps one primitive per thing only hardware can do:

- ``lgamma`` and ``digamma``: Lanczos approximation (g = 7, 9 terms) for ``x >= 1/2`` and the
  reflection formulas below; relative error about 1e-15 in f64 and a few f32 ulps in f32, except
  near the functions' zeros (``lgamma`` at 1 and 2, ``digamma`` at 1.4616...), where the error is
  absolute (about 1e-7 in f32).
- ``erfinv``: Giles' single-precision polynomial ("Approximating the erfinv function", 2010),
  accurate to a few f32 ulps; f64 adds two Newton steps on ``erf`` (as torch's ``calc_erfinv``
  does) for full double precision.

Half floats compute in f32 and round once (``opmath``), integers in the default float dtype.
"""

from __future__ import annotations

import math

import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .conventions import require
from .opmath import opmath
from .rules import RULES

aten = torch.ops.aten

_LANCZOS_G = 7.0
_LANCZOS_BASE = 0.99999999999980993227684700473478
_LANCZOS = (
    676.520368121885098567009190444019, -1259.13921672240287047156078755283,
    771.3234287776530788486528258894, -176.61502916214059906584551354,
    12.507343278686904814458936853, -0.13857109526572011689554707,
    9.984369578019570859563e-6, 1.50563273514931155834e-7,
)


def _lanczos_log_t(z):
    """``log(z + g + 1/2)``, written so that it stays accurate for small ``z``."""
    return knp.add(knp.log1p(knp.divide(z, _LANCZOS_G + 0.5)), math.log(_LANCZOS_G + 0.5))


def _lgamma(x):
    """``log|Γ(x)|``; ``x < 1/2`` by reflection: ``log(π / |sin(πx)|) - lgamma(1 - x)``.
    Poles (0 and the negative integers) and ``±inf`` give ``+inf``."""
    reflect = knp.less(x, 0.5)
    z = knp.where(reflect, knp.negative(x), knp.subtract(x, 1))
    series = _LANCZOS_BASE
    for i, c in enumerate(_LANCZOS):
        series = knp.add(series, knp.divide(c, knp.add(z, i + 1)))
    t = knp.add(z, _LANCZOS_G + 0.5)
    log_t = _lanczos_log_t(z)
    log_y = knp.add(knp.add(knp.multiply(knp.subtract(knp.add(z, 0.5), knp.divide(t, log_t)), log_t), knp.log(series)),
                    0.5 * math.log(2 * math.pi))
    frac = knp.subtract(knp.abs(x), knp.floor(knp.abs(x)))
    frac = knp.where(knp.greater(frac, 0.5), knp.subtract(1, frac), frac)
    log_sin = knp.log(knp.sin(knp.multiply(frac, math.pi)))
    reflected = knp.where(knp.isinf(log_sin), knp.negative(log_sin),
                          knp.subtract(knp.subtract(math.log(math.pi), log_sin), log_y))
    return knp.where(knp.isinf(x), math.inf, knp.where(reflect, reflected, log_y))


def _digamma(x):
    """``ψ(x)``; ``x < 1/2`` by reflection: ``ψ(1 - x) - π / tan(πx)``. As torch: ``-inf`` at
    ``+0``, ``+inf`` at ``-0``, NaN at the negative integers, ``ψ(inf) = inf``."""
    reflect = knp.less(x, 0.5)
    z = knp.where(reflect, knp.negative(x), knp.subtract(x, 1))
    num, denom = 0.0, _LANCZOS_BASE
    for i, c in enumerate(_LANCZOS):
        shifted = knp.add(z, i + 1)
        num = knp.subtract(num, knp.divide(c, knp.multiply(shifted, shifted)))
        denom = knp.add(denom, knp.divide(c, shifted))
    t = knp.add(z, _LANCZOS_G + 0.5)
    y = knp.subtract(knp.add(_lanczos_log_t(z), knp.divide(num, denom)), knp.divide(_LANCZOS_G, t))
    # π/tan(πx) with x moved by an integer near 0, where sin and cos lose no precision
    reduced = knp.subtract(x, knp.floor(knp.add(x, 0.5)))
    angle = knp.multiply(reduced, math.pi)
    reflected = knp.subtract(y, knp.divide(knp.multiply(knp.cos(angle), math.pi), knp.sin(angle)))
    result = knp.where(reflect, reflected, y)
    pole = knp.logical_and(knp.less(x, 0), knp.equal(x, knp.floor(x)))
    result = knp.where(pole, math.nan, result)
    zero = knp.where(knp.signbit(x), math.inf, -math.inf)
    result = knp.where(knp.equal(x, 0), zero, result)
    return knp.where(knp.equal(x, math.inf), math.inf, result)


def _trigamma(x):
    """``ψ'(x)``, torch's ``calc_trigamma``: reflection below 1/2
    (``ψ'(1 - x) + ψ'(x) = π² / sin²(πx)``), six recurrence steps, then the asymptotic series."""
    reflect = knp.less(x, 0.5)
    sin_pi_x = knp.sin(knp.multiply(x, math.pi))
    result = knp.where(reflect, knp.negative(knp.divide(math.pi**2, knp.multiply(sin_pi_x, sin_pi_x))), 0)
    z = knp.where(reflect, knp.subtract(1, x), x)
    for _ in range(6):
        result = knp.add(result, knp.divide(1, knp.multiply(z, z)))
        z = knp.add(z, 1)
    ixx = knp.divide(1, knp.multiply(z, z))
    series = knp.add(knp.add(1, knp.divide(1, knp.multiply(z, 2))), knp.polyval((1 / 42, -1 / 30, 1 / 6, 0), ixx))
    result = knp.add(result, knp.divide(series, z))
    return knp.where(reflect, knp.negative(result), result)


# Giles' polynomials in w = -log(1 - x²): central (w < 5, in w - 2.5) and tail (in sqrt(w) - 3)
_ERFINV_CENTRAL = (
    2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
    -0.00125372503, -0.00417768164, 0.246640727, 1.50140941,
)
_ERFINV_TAIL = (
    -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
    -0.0076224613, 0.00943887047, 1.00167406, 2.83297682,
)


def _erfinv(x):
    """``erf⁻¹(x)``: ``±inf`` at ``±1``, NaN outside ``[-1, 1]``."""
    w = knp.negative(knp.log(knp.multiply(knp.subtract(1, x), knp.add(1, x))))
    central = knp.polyval(_ERFINV_CENTRAL, knp.subtract(w, 2.5))
    tail = knp.polyval(_ERFINV_TAIL, knp.subtract(knp.sqrt(knp.where(knp.isinf(w), 0, w)), 3))
    y = knp.multiply(knp.where(knp.less(w, 5), central, tail), x)
    if knp.dtype_of(x) is DType.f64:
        for _ in range(2):
            slope = knp.multiply(2 / math.sqrt(math.pi), knp.exp(knp.negative(knp.multiply(y, y))))
            y = knp.subtract(y, knp.divide(knp.subtract(knp.erf(y), x), slope))
    return knp.where(knp.equal(knp.abs(x), 1), knp.multiply(x, math.inf), y)


@RULES.register(aten.erfc.default)
def erfc(ctx, x):
    return opmath(ctx.out_dtype, knp.erfc, x)


@RULES.register(aten.erfinv.default)
def erfinv(ctx, x):
    return opmath(ctx.out_dtype, _erfinv, x)


@RULES.register(aten.lgamma.default)
def lgamma(ctx, x):
    return opmath(ctx.out_dtype, _lgamma, x)


@RULES.register(aten.digamma.default)
def digamma(ctx, x):
    return opmath(ctx.out_dtype, _digamma, x)


@RULES.register(aten.polygamma.default)
def polygamma(ctx, n, x):
    """Orders 0 (``digamma``) and 1 (trigamma, ``digamma``'s derivative); higher orders need
    the Hurwitz zeta function and are declined."""
    require(n in (0, 1), f"polygamma of order {n} (orders 0 and 1 are lowered)")
    return opmath(ctx.out_dtype, _digamma if n == 0 else _trigamma, x)


@RULES.register(aten.signbit.default)
def signbit(ctx, x):
    return knp.signbit(x)


@RULES.register(aten.copysign.Tensor, aten.copysign.Scalar)
def copysign(ctx, x, other):
    """``|x|`` with the sign bit of ``other`` (so ``-0.0`` and a negative NaN count as negative)."""

    def fn(a, b):
        return knp.where(knp.signbit(b), knp.negative(knp.abs(a)), knp.abs(a))

    return opmath(ctx.out_dtype, fn, x, other)


@RULES.register(aten.atan2.out)
def atan2_out(ctx, x, other, *, out):
    """The value ``atan2(x, other, out=out)`` leaves in ``out``: computed in the promoted float
    dtype of the inputs, then converted to ``out``'s dtype, as torch's ``out=`` kernels do.
    AOTAutograd functionalizes ``out=`` calls into ``atan2`` and a copy; in a graph that keeps
    the ``out=`` form, the core's ``functionalize_writes`` makes later readers of ``out`` read
    this node and copies the value into ``out`` when it is a graph input."""
    dtype = knp.result_type(x, other)
    dtype = dtype if dtype.is_float else DType.from_torch(torch.get_default_dtype())
    result = opmath(dtype, knp.arctan2, x, other)
    return knp.astype(knp.broadcast_to(result, ctx.out.shape), ctx.out_dtype)

