"""Bessel functions and their relatives: ``i0``, ``special_i0e``, ``special_i1``,
``special_i1e``, ``special_modified_bessel_{i0,i1,k0,k1}``,
``special_scaled_modified_bessel_{k0,k1}``, ``special_bessel_{j0,j1,y0,y1}``,
``special_spherical_bessel_j0`` and ``special_airy_ai``.

Each is the Cephes approximation torch's CPU kernels evaluate (Moshier, *Methods and Programs
for Mathematical Functions*, 1989; coefficients in ``cephes_tables``), composed from
elementwise ops: every interval's formula is computed for every element and ``where`` picks
one, so the kernel has no branches. Accuracy is Cephes': about 1e-16 relative in f64 and a few
f32 ulps in f32, absolute (not relative) near the zeros of ``J``, ``Y`` and ``Ai``, where the
phase ``x - (2n + 1)π/4`` is rounded as torch rounds it. The edge values (``±inf``, NaN, 0,
negative arguments of ``K`` and ``Y``) are torch's. Integer inputs compute in the default float
dtype; torch has no half-float kernels for these ops except ``i0``, ``i0e``, ``i1`` and
``i1e``, which compute half floats in f32 (``opmath``).
"""

from __future__ import annotations

import math

import torch

from nkipy_core import knp

from . import cephes_tables as tables
from .opmath import opmath
from .rules import RULES

aten = torch.ops.aten

_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_TWO_OVER_PI = 2 / math.pi
_INV_SQRT_PI = 1 / math.sqrt(math.pi)


def _chebyshev(t, coefficients):
    """Cephes' ``chbevl``: the Chebyshev series ``Σ' c_k T_k(t/2)`` (first coefficient halved)
    by Clenshaw's recurrence, the coefficients given from the highest order down."""
    b0, b1, b2 = coefficients[0], 0.0, 0.0
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = knp.add(knp.subtract(knp.multiply(t, b1), b2), c)
    return knp.multiply(knp.subtract(b0, b2), 0.5)


def _rational(numerator, denominator, z):
    return knp.divide(knp.polyval(numerator, z), knp.polyval(denominator, z))


def _scaled_i(small, large, ax):
    """``exp(-|x|) I_n(|x|)`` (divided by ``|x|`` for order 1) on [0, 8] and
    ``exp(-|x|) sqrt(|x|) I_n(|x|)`` above: the two series, each at its own argument."""
    near = _chebyshev(knp.subtract(knp.multiply(ax, 0.5), 2), small)
    far = _chebyshev(knp.subtract(knp.divide(32, ax), 2), large)
    return knp.less_equal(ax, 8), near, far


def _i0(x):
    """``I0``; ``±inf`` give NaN (``exp(x) / sqrt(x)``), as torch."""
    ax = knp.abs(x)
    near_zone, near, far = _scaled_i(tables.I0_SMALL, tables.I0_LARGE, ax)
    grow = knp.exp(ax)
    return knp.where(
        near_zone, knp.multiply(grow, near), knp.divide(knp.multiply(grow, far), knp.sqrt(ax))
    )


def _i0e(x):
    """``exp(-|x|) I0(x)``: 0 at ``±inf``."""
    ax = knp.abs(x)
    near_zone, near, far = _scaled_i(tables.I0_SMALL, tables.I0_LARGE, ax)
    return knp.where(near_zone, near, knp.divide(far, knp.sqrt(ax)))


def _odd(x, magnitude):
    return knp.where(knp.less(x, 0), knp.negative(magnitude), magnitude)


def _i1(x):
    """``I1``, odd; ``±inf`` give NaN as for ``I0``."""
    ax = knp.abs(x)
    near_zone, near, far = _scaled_i(tables.I1_SMALL, tables.I1_LARGE, ax)
    grow = knp.exp(ax)
    magnitude = knp.where(
        near_zone,
        knp.multiply(knp.multiply(grow, ax), near),
        knp.divide(knp.multiply(grow, far), knp.sqrt(ax)),
    )
    return _odd(x, magnitude)


def _i1e(x):
    """``exp(-|x|) I1(x)``, odd: ``±0`` at ``±inf``."""
    ax = knp.abs(x)
    near_zone, near, far = _scaled_i(tables.I1_SMALL, tables.I1_LARGE, ax)
    return _odd(x, knp.where(near_zone, knp.multiply(near, ax), knp.divide(far, knp.sqrt(ax))))


def _k(order: int, scaled: bool):
    """``K0``/``K1`` (times ``exp(x)`` when ``scaled``): on (0, 2] the series for the part
    without the logarithm plus ``∓log(x/2) I_n(x)``, above it ``exp(-x) / sqrt(x)`` times the
    second series. ``+inf`` at 0, NaN below, 0 at ``+inf``."""
    small, large = (
        (tables.K0_SMALL, tables.K0_LARGE) if order == 0 else (tables.K1_SMALL, tables.K1_LARGE)
    )

    def fn(x):
        series = _chebyshev(knp.subtract(knp.multiply(x, x), 2), small)
        log_half = knp.log(knp.multiply(x, 0.5))
        if order == 0:
            near = knp.subtract(series, knp.multiply(log_half, _i0(x)))
        else:
            near = knp.add(knp.multiply(log_half, _i1(x)), knp.divide(series, x))
        far = knp.divide(_chebyshev(knp.subtract(knp.divide(8, x), 2), large), knp.sqrt(x))
        if scaled:
            near = knp.multiply(near, knp.exp(x))
        else:
            far = knp.multiply(knp.exp(knp.negative(x)), far)
        result = knp.where(knp.less_equal(x, 2), near, far)
        result = knp.where(knp.less(x, 0), math.nan, result)
        return knp.where(knp.equal(x, 0), math.inf, result)

    return fn


def _bessel_far(x, order: int):
    """``J_n`` and ``Y_n`` for ``x > 5`` (Hankel's asymptotic form):
    ``sqrt(2/(πx)) (P cos θ - Q sin θ)`` and ``sqrt(2/(πx)) (P sin θ + Q cos θ)`` with
    ``θ = x - (2n + 1)π/4``, ``P`` and ``Q`` rational in ``25/x²``."""
    pp, pq, qp, qq = (
        (tables.J0_PP, tables.J0_PQ, tables.J0_QP, tables.J0_QQ)
        if order == 0
        else (tables.J1_PP, tables.J1_PQ, tables.J1_QP, tables.J1_QQ)
    )
    w = knp.divide(25, knp.multiply(x, x))
    p = _rational(pp, pq, w)
    q = knp.multiply(knp.divide(5, x), _rational(qp, qq, w))
    theta = knp.subtract(x, (2 * order + 1) * math.pi / 4)
    cos, sin = knp.cos(theta), knp.sin(theta)
    scale = knp.divide(_SQRT_2_OVER_PI, knp.sqrt(x))
    j = knp.multiply(knp.subtract(knp.multiply(p, cos), knp.multiply(q, sin)), scale)
    y = knp.multiply(knp.add(knp.multiply(p, sin), knp.multiply(q, cos)), scale)
    return j, y


def _j0_near(ax):
    """``J0`` on [0, 5]: the rational form, ``1 - x²/4`` below 1e-5 (as torch)."""
    z = knp.multiply(ax, ax)
    zeros = knp.multiply(
        knp.subtract(z, 5.78318596294678452118), knp.subtract(z, 30.4712623436620863991)
    )
    rational = knp.multiply(zeros, _rational(tables.J0_RP, tables.J0_RQ, z))
    return knp.where(knp.less(ax, 1e-5), knp.subtract(1, knp.multiply(z, 0.25)), rational)


def _j1_near(x):
    """``J1`` on [-5, 5] (odd; the rational form times ``x``)."""
    z = knp.multiply(x, x)
    zeros = knp.multiply(
        knp.subtract(z, 14.6819706421238932572), knp.subtract(z, 49.2184563216946036703)
    )
    return knp.multiply(knp.multiply(_rational(tables.J1_RP, tables.J1_RQ, z), x), zeros)


def _j0(x):
    """``J0``, even; NaN at ``±inf`` (the phase of ``inf``), as torch."""
    ax = knp.abs(x)
    return knp.where(knp.less_equal(ax, 5), _j0_near(ax), _bessel_far(ax, 0)[0])


def _j1(x):
    """``J1``, odd; NaN at ``±inf``."""
    ax = knp.abs(x)
    return knp.where(knp.less_equal(ax, 5), _j1_near(x), _odd(x, _bessel_far(ax, 1)[0]))


def _y(order: int):
    """``Y0``/``Y1``: on (0, 5] the rational part plus the ``J_n log x`` (and, for order 1,
    ``-1/x``) term, above it the asymptotic form. ``-inf`` at 0, NaN below 0 and at ``+inf``."""

    def fn(x):
        z = knp.multiply(x, x)
        log_x = knp.log(x)
        if order == 0:
            near = knp.add(
                _rational(tables.Y0_YP, tables.Y0_YQ, z),
                knp.multiply(knp.multiply(log_x, _j0_near(x)), _TWO_OVER_PI),
            )
        else:
            singular = knp.subtract(knp.multiply(_j1_near(x), log_x), knp.divide(1, x))
            near = knp.add(
                knp.multiply(x, _rational(tables.Y1_YP, tables.Y1_YQ, z)),
                knp.multiply(singular, _TWO_OVER_PI),
            )
        result = knp.where(knp.less_equal(x, 5), near, _bessel_far(x, order)[1])
        result = knp.where(knp.less(x, 0), math.nan, result)
        return knp.where(knp.equal(x, 0), -math.inf, result)

    return fn


def _spherical_j0(x):
    """``sin(x)/x``; its Taylor polynomial (to ``x¹²``) below 1/2, where the quotient loses
    precision, and 0 at ``±inf``."""
    z = knp.multiply(x, x)
    taylor = knp.polyval([(-1) ** k / math.factorial(2 * k + 1) for k in range(6, -1, -1)], z)
    result = knp.where(knp.less(knp.abs(x), 0.5), taylor, knp.divide(knp.sin(x), x))
    return knp.where(knp.isinf(x), 0, result)


# Ai(0) and -Ai'(0): the weights of the two power series below
_AIRY_F0 = 0.355028053887817239260
_AIRY_G0 = 0.258819403792806798405
_AIRY_SERIES_TERMS = 12


def _airy_ai(x):
    """``Ai``: for ``x < -2.09`` the oscillating asymptotic form, for ``x >= 2.09`` the
    decaying one (0 above 103.892, where it underflows), in between the Maclaurin series
    ``Ai(0) f(x) + Ai'(0) g(x)`` with ``f = Σ 3ᵏ (1/3)ₖ x³ᵏ / (3k)!`` and
    ``g = Σ 3ᵏ (2/3)ₖ x³ᵏ⁺¹ / (3k + 1)!``. torch sums the series until a term is below
    machine epsilon; here it has a fixed twelve terms, past that point for ``|x| <= 2.09``
    in f64. NaN at ``±inf``."""
    # ζ = (2/3)|x|^(3/2), rounded in torch's order: the phase of the oscillation depends on it
    zeta = knp.divide(knp.multiply(knp.multiply(knp.abs(x), 2), knp.sqrt(knp.abs(x))), 3)
    # x < -2.09
    z = knp.divide(1, zeta)
    zz = knp.multiply(z, z)
    modulus = knp.add(1, knp.multiply(zz, _rational(tables.AIRY_FN, tables.AIRY_FD, zz)))
    phase = knp.multiply(z, _rational(tables.AIRY_GN, tables.AIRY_GD, zz))
    t = knp.add(zeta, math.pi / 4)
    oscillating = knp.multiply(
        knp.divide(_INV_SQRT_PI, knp.sqrt(knp.sqrt(knp.negative(x)))),
        knp.subtract(knp.multiply(knp.sin(t), modulus), knp.multiply(knp.cos(t), phase)),
    )
    # x >= 2.09
    decaying = knp.divide(
        knp.multiply(_rational(tables.AIRY_N, tables.AIRY_D, knp.divide(1, zeta)), _INV_SQRT_PI),
        knp.multiply(knp.multiply(knp.sqrt(knp.sqrt(x)), 2), knp.exp(zeta)),
    )
    # |x| < 2.09
    cube = knp.multiply(knp.multiply(x, x), x)
    f, g, m, n = 1.0, x, 1.0, x
    for i in range(_AIRY_SERIES_TERMS):
        k = 3 * i + 2
        m = knp.multiply(m, knp.divide(cube, k * (k + 1)))
        n = knp.multiply(n, knp.divide(cube, (k + 1) * (k + 2)))
        f, g = knp.add(f, m), knp.add(g, n)
    series = knp.subtract(knp.multiply(f, _AIRY_F0), knp.multiply(g, _AIRY_G0))
    result = knp.where(
        knp.less(x, -2.09), oscillating, knp.where(knp.greater_equal(x, 2.09), decaying, series)
    )
    result = knp.where(knp.greater(x, 103.892), 0, result)
    return knp.where(knp.isinf(x), math.nan, result)


_UNARY = [
    (_i0, aten.i0.default, aten.special_modified_bessel_i0.default),
    (_i0e, aten.special_i0e.default),
    (_i1, aten.special_i1.default, aten.special_modified_bessel_i1.default),
    (_i1e, aten.special_i1e.default),
    (_k(0, scaled=False), aten.special_modified_bessel_k0.default),
    (_k(1, scaled=False), aten.special_modified_bessel_k1.default),
    (_k(0, scaled=True), aten.special_scaled_modified_bessel_k0.default),
    (_k(1, scaled=True), aten.special_scaled_modified_bessel_k1.default),
    (_j0, aten.special_bessel_j0.default),
    (_j1, aten.special_bessel_j1.default),
    (_y(0), aten.special_bessel_y0.default),
    (_y(1), aten.special_bessel_y1.default),
    (_spherical_j0, aten.special_spherical_bessel_j0.default),
    (_airy_ai, aten.special_airy_ai.default),
]


def _rule(fn):
    def rule(ctx, x):
        return opmath(ctx.out_dtype, fn, x)

    return rule


for _fn, *_ops in _UNARY:
    RULES.register(*_ops)(_rule(_fn))
