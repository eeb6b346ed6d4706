"""Classical orthogonal polynomials of a tensor degree: ``special_chebyshev_polynomial_{t,u,v,w}``,
``special_shifted_chebyshev_polynomial_{t,u,v,w}``, ``special_hermite_polynomial_{h,he}``,
``special_laguerre_polynomial_l`` and ``special_legendre_polynomial_p`` (each in its
``default``, ``x_scalar`` and ``n_scalar`` forms).

torch's kernels truncate the degree ``n`` to an integer (NaN, ``±inf`` and negative degrees give
0) and run the three-term recurrence ``n - 1`` times for each element. A kernel has no loop
whose trip count depends on data, so here the recurrence is unrolled to a static bound and
each element picks the step equal to its degree (``where``): the values are torch's, rounded
the same way. The bound is the degree itself when it is a Python number (up to
``MAX_STATIC_DEGREE``; above, the rule declines and the op runs on CPU) and
``MAX_TENSOR_DEGREE`` when it is a tensor, whose values are not known when the kernel is built.
Past that bound:

- the Chebyshev families use their closed forms, valid for every degree: for ``|x| < 1``
  ``T_n = cos(nθ)``, ``U_n = sin((n+1)θ)/sin θ``, ``V_n = cos((n+½)θ)/cos(θ/2)``,
  ``W_n = sin((n+½)θ)/sin(θ/2)`` with ``x = cos θ`` (torch itself switches to them above
  degree 6 or 8), and for ``|x| > 1`` the same with ``cosh``/``sinh`` of ``t = acosh |x|`` and
  the parity ``(-1)ⁿ`` for negative ``x`` (where ``V`` and ``W`` trade places), so any degree is
  exact to a few ulps of the (fast-growing) value;
- Hermite, Laguerre and Legendre have no such form, and the elements whose degree is above
  the bound are NaN. Hermite values of such degrees overflow f32 except near the zeros
  (torch itself returns NaN above degree 128 in f32, 512 in f64); for Laguerre and Legendre,
  whose values stay moderate, a degree above the bound needs a Python-number degree or CPU.

Results are floats (integer operands compute in the default float dtype, as torch); torch has
no half-float kernels for these ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .conventions import require
from .opmath import is_array
from .rules import RULES

aten = torch.ops.aten

#: the last degree unrolled for a tensor degree
MAX_TENSOR_DEGREE = 64
#: the largest Python-number degree lowered (the recurrence has one step per degree)
MAX_STATIC_DEGREE = 256


@attrs.frozen
class _Family:
    """A recurrence ``P_{k+1} = step(k, x, P_k, P_{k-1})`` from ``P_0 = 1`` and
    ``P_1 = first(x)``; ``edge(x, n, value, bound)`` applies torch's special cases (``|x| = 1`` and
    the like) and the closed forms; ``closed`` says whether those cover every degree past the
    unrolled ``bound``."""

    first: Callable[[Any], Any]
    step: Callable[[int, Any, Any, Any], Any]
    edge: Callable[[Any, Any, Any, int], Any] | None = None
    closed: bool = False


def _odd(n):
    return knp.equal(knp.remainder(n, 2), 1)


def _parity(n, value):
    """``(-1)ⁿ value``."""
    return knp.where(_odd(n), knp.negative(value), value)


def _chebyshev_step(k, x, q, p):
    return knp.subtract(knp.multiply(knp.add(x, x), q), p)


# kind: (m - n, sine-like, d) of the closed forms f(mθ)/f(dθ) (f = sin or cos; no
# denominator when d is None) and f(mt)/f(dt) with f = sinh or cosh
_CHEBYSHEV_FORMS = {
    "t": (0.0, False, None),
    "u": (1.0, True, 1.0),
    "v": (0.5, False, 0.5),
    "w": (0.5, True, 0.5),
}


def _closed_form(m, angle, sine_like: bool, d, functions):
    sine, cosine = functions
    f = sine if sine_like else cosine
    value = f(knp.multiply(m, angle))
    return value if d is None else knp.divide(value, f(knp.multiply(angle, d)))


def _chebyshev_edge(kind: str, trig_above: int):
    """torch's special cases of the Chebyshev polynomial ``kind`` at ``x = ±1``, its
    trigonometric form above degree ``trig_above`` for ``|x| < 1``, and (ours) the hyperbolic
    form above the unrolled bound for ``|x| > 1``: there ``P(-x) = (-1)ⁿ P(x)`` for ``T`` and
    ``U``, ``V(-x) = (-1)ⁿ W(x)`` and ``W(-x) = (-1)ⁿ V(x)``."""
    offset, sine_like, d = _CHEBYSHEV_FORMS[kind]

    def edge(x, n, value, bound):
        m = knp.add(n, offset)
        theta = knp.arccos(x)
        trig = _closed_form(m, theta, sine_like, d, (knp.sin, knp.cos))
        odd_count = knp.add(knp.add(n, n), 1)
        # torch's guards where the denominator rounds to 0 (θ within an ulp of 0 or π)
        if kind == "u":
            limit = knp.divide(knp.multiply(m, knp.cos(knp.multiply(m, theta))), x)
            trig = knp.where(knp.equal(knp.sin(theta), 0), limit, trig)
        elif kind == "v":
            at_pi = knp.equal(knp.sin(knp.multiply(theta, 0.5)), 1)
            trig = knp.where(at_pi, _parity(n, odd_count), trig)
        elif kind == "w":
            limit = knp.where(knp.greater(x, 0), odd_count, _parity(n, 1.0))
            trig = knp.where(knp.equal(knp.cos(knp.multiply(theta, 0.5)), 1), limit, trig)
        ax = knp.abs(x)
        t = knp.arccosh(ax)
        hyper = _closed_form(m, t, sine_like, d, (knp.sinh, knp.cosh))
        mirrored = sine_like if d is None or d == 1.0 else not sine_like
        negative = _parity(n, _closed_form(m, t, mirrored, d, (knp.sinh, knp.cosh)))
        hyper = knp.where(knp.less(x, 0), negative, hyper)
        inside = knp.less(ax, 1)
        value = knp.where(knp.logical_and(inside, knp.greater(n, trig_above)), trig, value)
        value = knp.where(knp.logical_and(knp.greater(ax, 1), knp.greater(n, bound)), hyper, value)
        # x = ±1: T = (±1)ⁿ, U = (±1)ⁿ (n+1), V(1) = 1, V(-1) = (-1)ⁿ(2n+1), W the reverse
        at_plus = {"t": 1.0, "u": knp.add(n, 1), "v": 1.0, "w": odd_count}[kind]
        at_minus = {"t": 1.0, "u": knp.add(n, 1), "v": odd_count, "w": 1.0}[kind]
        value = knp.where(knp.equal(x, 1), at_plus, value)
        return knp.where(knp.equal(x, -1), _parity(n, at_minus), value)

    return edge


def _chebyshev(kind: str, trig_above: int) -> _Family:
    first = {
        "t": lambda x: x,
        "u": lambda x: knp.add(x, x),
        "v": lambda x: knp.subtract(knp.add(x, x), 1),
        "w": lambda x: knp.add(knp.add(x, x), 1),
    }[kind]
    return _Family(first, _chebyshev_step, _chebyshev_edge(kind, trig_above), closed=True)


def _legendre_edge(x, n, value, bound):
    value = knp.where(knp.equal(x, 1), 1, value)
    return knp.where(knp.equal(x, -1), _parity(n, 1.0), value)


def _laguerre_edge(x, n, value, bound):
    return knp.where(knp.equal(x, 0), 1, value)


_HERMITE_H = _Family(
    lambda x: knp.add(x, x),
    lambda k, x, q, p: knp.subtract(knp.multiply(knp.add(x, x), q), knp.multiply(p, 2 * k)),
)
_HERMITE_HE = _Family(
    lambda x: x, lambda k, x, q, p: knp.subtract(knp.multiply(x, q), knp.multiply(p, k))
)
_LAGUERRE = _Family(
    lambda x: knp.subtract(1, x),
    lambda k, x, q, p: knp.divide(
        knp.subtract(knp.multiply(knp.add(knp.subtract(1, x), 2 * k), q), knp.multiply(p, k)),
        k + 1,
    ),
    _laguerre_edge,
)
_LEGENDRE = _Family(
    lambda x: x,
    lambda k, x, q, p: knp.divide(
        knp.subtract(knp.multiply(knp.multiply(x, 2 * k + 1), q), knp.multiply(p, k)), k + 1
    ),
    _legendre_edge,
)


def _degree(n, dtype: DType):
    """torch's ``static_cast<int64_t>(n)``: truncated; NaN, infinities and values out of the
    int64 range become the most negative int64 (x86's conversion), which gives 0."""
    n = knp.astype(n, dtype)
    out_of_range = knp.logical_not(knp.less(knp.abs(n), 2.0**63))
    return knp.where(out_of_range, -1, knp.trunc(n))


def _evaluate(family: _Family, x, n, bound: int):
    """``P_n(x)`` for degrees up to ``bound`` by the unrolled recurrence; 0 for negative
    degrees, NaN above ``bound`` unless the family's closed forms cover them."""
    p, q = 1.0, family.first(x)
    value = knp.where(knp.equal(n, 0), 1, q)
    for k in range(1, bound):
        p, q = q, family.step(k, x, q, p)
        value = knp.where(knp.equal(n, k + 1), q, value)
    if not family.closed:
        value = knp.where(knp.greater(n, bound), math.nan, value)
    if family.edge is not None:
        value = family.edge(x, n, value, bound)
    return knp.where(knp.less(n, 0), 0, value)


def _rule(family: _Family, shifted: bool):
    """The rule of ``family``'s op; ``shifted``: at ``2x - 1`` (torch's shifted Chebyshev
    kernels are the plain ones at ``x + x - 1``, with their own trigonometric thresholds)."""

    def rule(ctx, x, n):
        dtype = ctx.out_dtype
        require(dtype.is_float and not dtype.is_half, f"{dtype} results (torch has no such kernel)")
        if is_array(n):
            bound = MAX_TENSOR_DEGREE
        else:
            bound = max(1, math.trunc(n)) if math.isfinite(n) else 1
            require(
                bound <= MAX_STATIC_DEGREE,
                f"degree {n} above {MAX_STATIC_DEGREE} (one recurrence step per degree)",
            )
        x = knp.astype(x if is_array(x) else knp.full((), x, dtype), dtype)
        if shifted:
            x = knp.subtract(knp.add(x, x), 1)
        n = _degree(n if is_array(n) else knp.full((), n, dtype), dtype)
        return _evaluate(family, x, n, bound)

    return rule


_FAMILIES = [
    (_chebyshev("t", 6), "chebyshev_polynomial_t", False),
    (_chebyshev("u", 8), "chebyshev_polynomial_u", False),
    (_chebyshev("v", 8), "chebyshev_polynomial_v", False),
    (_chebyshev("w", 8), "chebyshev_polynomial_w", False),
    (_chebyshev("t", 6), "shifted_chebyshev_polynomial_t", True),
    (_chebyshev("u", 6), "shifted_chebyshev_polynomial_u", True),
    (_chebyshev("v", 6), "shifted_chebyshev_polynomial_v", True),
    (_chebyshev("w", 4), "shifted_chebyshev_polynomial_w", True),
    (_HERMITE_H, "hermite_polynomial_h", False),
    (_HERMITE_HE, "hermite_polynomial_he", False),
    (_LAGUERRE, "laguerre_polynomial_l", False),
    (_LEGENDRE, "legendre_polynomial_p", False),
]


for _family, _name, _is_shifted in _FAMILIES:
    _packet = getattr(aten, f"special_{_name}")
    RULES.register(_packet.default, _packet.x_scalar, _packet.n_scalar)(_rule(_family, _is_shifted))
