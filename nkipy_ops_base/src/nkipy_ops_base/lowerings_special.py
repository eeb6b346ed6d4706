"""Special functions and sign manipulation: ``erfc``, ``erfinv``, ``lgamma``, ``digamma`` and
its derivatives (``polygamma``), the Hurwitz zeta function (``special_zeta``), ``signbit``,
``copysign``, and ``atan2``'s ``out=`` form.

``erfc`` and ``signbit`` are primitives (``1 - erf`` cancels to zero in the tail, and the sign
of a NaN or of ``-0.0`` cannot be read without one). The others are composed here, the way XLA's
client library builds its ``Lgamma``, ``Digamma`` and ``ErfInv`` from elementwise ops, so that
the IR keeps one primitive per thing only hardware can do:

- ``lgamma`` and ``digamma``: Lanczos approximation (g = 7, 9 terms) for ``x >= 1/2`` and the
  reflection formulas below; relative error about 1e-15 in f64 and a few f32 ulps in f32, except
  near the functions' zeros (``lgamma`` at 1 and 2, ``digamma`` at 1.4616...), where the error is
  absolute (about 1e-7 in f32).
- ``polygamma``: order 1 is torch's trigamma series; higher orders the Hurwitz zeta function as
  Cephes computes it (ten terms, then Euler-Maclaurin), below 1/2 through the reflection formula
  with the derivatives of ``cot`` as polynomials; a few f32 ulps, about 1e-11 relative in f64.
- ``special_zeta``: the same Hurwitz zeta sum with a tensor exponent (torch's kernel is that
  Cephes routine); a negative ``q`` is moved above 0 by up to 16 explicit terms.
- ``erfinv``: Giles' single-precision polynomial ("Approximating the erfinv function", 2010),
  accurate to a few f32 ulps; f64 adds two Newton steps on ``erf`` (as torch's ``calc_erfinv``
  does) for full double precision.

Half floats compute in f32 and round once (``opmath``), integers in the default float dtype.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .conventions import require
from .opmath import is_array, opmath
from .rules import RULES

aten = torch.ops.aten

_LANCZOS_G = 7.0
_LANCZOS_BASE = 0.99999999999980993227684700473478
_LANCZOS = (
    676.520368121885098567009190444019,
    -1259.13921672240287047156078755283,
    771.3234287776530788486528258894,
    -176.61502916214059906584551354,
    12.507343278686904814458936853,
    -0.13857109526572011689554707,
    9.984369578019570859563e-6,
    1.50563273514931155834e-7,
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
    log_y = knp.add(
        knp.add(
            knp.multiply(knp.subtract(knp.add(z, 0.5), knp.divide(t, log_t)), log_t),
            knp.log(series),
        ),
        0.5 * math.log(2 * math.pi),
    )
    frac = knp.subtract(knp.abs(x), knp.floor(knp.abs(x)))
    frac = knp.where(knp.greater(frac, 0.5), knp.subtract(1, frac), frac)
    log_sin = knp.log(knp.sin(knp.multiply(frac, math.pi)))
    reflected = knp.where(
        knp.isinf(log_sin),
        knp.negative(log_sin),
        knp.subtract(knp.subtract(math.log(math.pi), log_sin), log_y),
    )
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
    result = knp.where(
        reflect, knp.negative(knp.divide(math.pi**2, knp.multiply(sin_pi_x, sin_pi_x))), 0
    )
    z = knp.where(reflect, knp.subtract(1, x), x)
    for _ in range(6):
        result = knp.add(result, knp.divide(1, knp.multiply(z, z)))
        z = knp.add(z, 1)
    ixx = knp.divide(1, knp.multiply(z, z))
    series = knp.add(
        knp.add(1, knp.divide(1, knp.multiply(z, 2))), knp.polyval((1 / 42, -1 / 30, 1 / 6, 0), ixx)
    )
    result = knp.add(result, knp.divide(series, z))
    return knp.where(reflect, knp.negative(result), result)


# Euler-Maclaurin coefficients of Cephes' ``zeta`` (what torch's ``polygamma`` calls): (2j)!/B_2j
_ZETA_EULER_MACLAURIN = (
    12.0,
    -720.0,
    30240.0,
    -1209600.0,
    47900160.0,
    -1.8924375803183791606e9,
    7.47242496e10,
    -2.950130727918164224e12,
    1.1646782814350067249e14,
    -4.5979787224074726105e15,
    1.8152105401943546773e17,
    -7.1661652561756670113e18,
)


def _hurwitz_zeta(s, q):
    """``ζ(s, q) = Σ (q + k)^-s`` for ``s > 1`` (a static integer or an array) and ``q > 0``,
    as Cephes: ten terms summed directly, then the Euler-Maclaurin tail from ``q + 9``."""
    static = not is_array(s)
    negated = -s if static else knp.negative(s)
    total = 0
    for k in range(10):
        term = knp.power(knp.add(q, k), negated)
        total = knp.add(total, term)
    a = knp.add(q, 9)
    s_minus_1 = s - 1 if static else knp.subtract(s, 1)
    total = knp.add(
        total, knp.subtract(knp.divide(knp.multiply(term, a), s_minus_1), knp.multiply(term, 0.5))
    )
    # the j-th correction is s (s+1) ... (s+2j) a^-(s+2j+1) / c_j, built up one factor at a
    # time so that neither the rising product nor the power leaves the range for a large s
    scaled = term
    for i, c in enumerate(_ZETA_EULER_MACLAURIN):
        scaled = knp.multiply(scaled, knp.divide(s + 2 * i if static else knp.add(s, 2 * i), a))
        total = knp.add(total, knp.divide(scaled, c))
        scaled = knp.multiply(
            scaled, knp.divide(s + 2 * i + 1 if static else knp.add(s, 2 * i + 1), a)
        )
    return total


#: how far below 0 ``zeta``'s ``q`` may be: one term of the sum per unit
_ZETA_NEGATIVE_SHIFTS = 16


def _zeta(x, q):
    """torch's ``special_zeta(x, q)``, the Hurwitz zeta function: ``inf`` at ``x = 1`` and at
    ``q`` = 0, -1, -2, ...; NaN for ``x < 1``, and for ``q < 0`` unless ``x`` is an integer.
    A negative ``q`` is first moved up by ``m = ceil(-q)``,
    ``ζ(x, q) = Σ_{k<m} (q + k)^-x + ζ(x, q + m)``, the sum unrolled to 16 terms (NaN below
    ``q = -16``; torch sums any number)."""
    shift = knp.maximum(knp.ceil(knp.negative(q)), 0)
    head = 0
    for k in range(_ZETA_NEGATIVE_SHIFTS):
        term = knp.power(knp.add(q, k), knp.negative(x))
        head = knp.add(head, knp.where(knp.less(k, shift), term, 0))
    moved = knp.add(q, shift)
    result = knp.add(head, _hurwitz_zeta(x, knp.where(knp.equal(moved, 0), 1, moved)))
    negative_q = knp.less_equal(q, 0)
    result = knp.where(knp.greater(shift, _ZETA_NEGATIVE_SHIFTS), math.nan, result)
    result = knp.where(
        knp.logical_and(negative_q, knp.not_equal(x, knp.floor(x))), math.nan, result
    )
    result = knp.where(knp.logical_and(negative_q, knp.equal(q, knp.floor(q))), math.inf, result)
    # x = inf, as torch: inf for q < 1 (a term |q + k| < 1 is there), 1 at q = 1, and NaN
    # above (its correction terms are 0 * inf)
    first = knp.where(knp.less(q, 1), math.inf, knp.where(knp.equal(q, 1), 1, math.nan))
    result = knp.where(knp.equal(x, math.inf), first, result)
    result = knp.where(knp.less(x, 1), math.nan, result)
    return knp.where(knp.equal(x, 1), math.inf, result)


def _cot_derivative(n: int) -> list[float]:
    """Coefficients (highest first) of ``P_n`` with ``dⁿ/dxⁿ cot(x) = P_n(cot x)``:
    ``P_0(c) = c`` and ``P_{k+1}(c) = -(1 + c²) P_k'(c)``."""
    p = np.polynomial.Polynomial([0.0, 1.0])
    for _ in range(n):
        p = -np.polynomial.Polynomial([1.0, 0.0, 1.0]) * p.deriv()
    return list(p.coef[::-1])


def _cot_pi(x):
    """``cot(πx)``, accurate near the poles and zeros: ``x`` is first reduced by an integer to
    ``r`` in [-1/2, 1/2] (exactly), and near ``r = ±1/2`` it is ``-tan(π(r ∓ 1/2))``."""
    r = knp.subtract(x, knp.round(x))
    shifted = knp.subtract(r, knp.multiply(knp.sign(r), 0.5))
    near_zero = knp.negative(knp.tan(knp.multiply(shifted, math.pi)))
    return knp.where(
        knp.greater(knp.abs(r), 0.25), near_zero, knp.divide(1, knp.tan(knp.multiply(r, math.pi)))
    )


def _polygamma(n: int):
    """``ψ⁽ⁿ⁾(x) = (-1)ⁿ⁺¹ n! ζ(n + 1, x)`` for ``n >= 2``; below 1/2 by reflection,
    ``ψ⁽ⁿ⁾(x) = (-1)ⁿ⁺¹ ((-1)ⁿ πⁿ⁺¹ P_n(cot πx) - ψ⁽ⁿ⁾(1 - x))``. As torch: ``±inf`` (the sign of
    ``(-1)ⁿ⁺¹``) at the poles and at ``-inf``, NaN at ``+inf``."""
    sign = -1.0 if n % 2 == 0 else 1.0

    def fn(x):
        reflect = knp.less(x, 0.5)
        q = knp.where(reflect, knp.subtract(1, x), x)
        direct = knp.multiply(_hurwitz_zeta(n + 1, q), sign * math.factorial(n))
        cot_term = knp.multiply(
            knp.polyval(_cot_derivative(n), _cot_pi(x)), (-1.0) ** n * math.pi ** (n + 1)
        )
        reflected = knp.multiply(knp.subtract(cot_term, direct), sign)
        result = knp.where(reflect, reflected, direct)
        pole = knp.logical_and(knp.less_equal(x, 0), knp.equal(x, knp.floor(x)))
        result = knp.where(pole, sign * math.inf, result)
        return knp.where(knp.equal(x, math.inf), math.nan, result)

    return fn


# Giles' polynomials in w = -log(1 - x²): central (w < 5, in w - 2.5) and tail (in sqrt(w) - 3)
_ERFINV_CENTRAL = (
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
)
_ERFINV_TAIL = (
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
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
    """Order 0 is ``digamma``, 1 trigamma (torch's own series), higher orders the Hurwitz zeta."""
    require(n >= 0, f"polygamma of negative order {n}")
    return opmath(ctx.out_dtype, _digamma if n == 0 else _trigamma if n == 1 else _polygamma(n), x)


@RULES.register(
    aten.special_zeta.default, aten.special_zeta.self_scalar, aten.special_zeta.other_scalar
)
def zeta(ctx, x, q):
    return opmath(ctx.out_dtype, _zeta, x, q)


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
