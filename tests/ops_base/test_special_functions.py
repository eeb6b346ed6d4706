"""Bessel, Airy, normal-distribution, zeta and orthogonal-polynomial rules, compiled strictly and
compared with eager on grids that include the edge values (``±inf``, NaN, ``±0``, negative
arguments, the interval boundaries of the approximations, large arguments), plus the limits of
the polynomial rules' unrolled recurrence. Each op is compiled on its own (a kernel holding
several of these long compositions takes longer to build than the ops one by one)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from nkipy_core import FallbackWarning

S = torch.special
INF, NAN = math.inf, math.nan

BESSEL = [
    torch.i0,
    S.i0e,
    S.i1,
    S.i1e,
    S.modified_bessel_i0,
    S.modified_bessel_i1,
    S.modified_bessel_k0,
    S.modified_bessel_k1,
    S.scaled_modified_bessel_k0,
    S.scaled_modified_bessel_k1,
    S.bessel_j0,
    S.bessel_j1,
    S.bessel_y0,
    S.bessel_y1,
    S.spherical_bessel_j0,
    S.airy_ai,
]
EDGES = [0.0, -0.0, 1e-6, -1e-6, 0.4, 2.0, -2.0, 2.09, -2.09, 5.0, 8.0, -8.0, 100.0, -100.0]
EDGES += [1e3, -1e3, 1e30, INF, -INF, NAN]
# (rtol, atol): a few ulps; absolute near the zeros of the oscillating functions
TOLERANCE = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-13, 1e-14)}


def _strict(fn):
    return torch.compile(fn, backend="nkipy", options={"strict": True}, dynamic=False)


def _assert_matches_eager(fn, *args, dtype, atol=None):
    rtol, default_atol = TOLERANCE[dtype]
    atol = default_atol if atol is None else atol
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        actual = _strict(fn)(*args)
    torch.testing.assert_close(actual, fn(*args), rtol=rtol, atol=atol, equal_nan=True)


def _grid(lo, hi, n, dtype, edges=EDGES):
    return torch.cat([torch.linspace(lo, hi, n, dtype=torch.float64), torch.tensor(edges)]).to(
        dtype
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_bessel_and_airy_functions_match_eager(dtype):
    x = _grid(-30, 30, 601, dtype)
    for fn in BESSEL:
        _assert_matches_eager(fn, x, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_exponentially_scaled_bessel_functions_of_half_floats_compute_in_f32(dtype):
    x = _grid(-12, 12, 97, dtype, edges=[0.0, INF, -INF, NAN])
    for fn in (torch.i0, S.i0e, S.i1, S.i1e):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            actual = _strict(fn)(x)
        assert actual.dtype == dtype
        torch.testing.assert_close(actual, fn(x), equal_nan=True)


def test_integer_arguments_compute_in_the_default_float_dtype():
    x = torch.arange(-6, 7)
    for fn in (S.bessel_j0, S.modified_bessel_k1, S.ndtri, S.erfcx):
        _assert_matches_eager(fn, x, dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_normal_distribution_functions_match_eager(dtype):
    y = _grid(-0.1, 1.1, 241, dtype, edges=[0.0, 1.0, 1e-30, 1 - 1e-7, 0.135, 0.865, INF, NAN])
    x = _grid(-30, 60, 901, dtype, edges=[0.0, -0.0, 3.0, -26.7, 50.0, 1e10, INF, -INF, NAN])
    # torch's erfcx(x < 0) = 2 exp(x * x) - erfcx(-x) carries the rounding of x * x (up to 32
    # f32 ulps at x = -9); the rule's exact square is closer to the true value
    rtol = {torch.float32: 4e-6, torch.float64: 1e-13}[dtype]
    for fn, arg in ((S.ndtri, y), (S.erfcx, x), (S.log_ndtr, x)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            actual = _strict(fn)(arg)
        torch.testing.assert_close(
            actual, fn(arg), rtol=rtol, atol=TOLERANCE[dtype][1], equal_nan=True
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_hurwitz_zeta_matches_eager(dtype):
    x = torch.tensor([-1.0, 0.5, 1.0, 1.0001, 1.5, 2.0, 3.61, 4.0, 10.0, 100.0, INF, NAN])
    q = torch.tensor([-16.0, -3.0, -2.5, 0.0, 1e-6, 0.3, 1.0, 4.55, 9.0, 100.0, 1e4, INF, NAN])
    x, q = x.to(dtype)[:, None], q.to(dtype)[None, :]
    _assert_matches_eager(S.zeta, x, q, dtype=dtype)
    _assert_matches_eager(lambda q: S.zeta(3.0, q), q, dtype=dtype)


def test_hurwitz_zeta_below_q_minus_16_is_nan():
    """A negative ``q`` takes one explicit term per unit below 0; 16 are unrolled."""
    x, q = torch.tensor([2.0, 4.0]), torch.tensor([-15.5, -16.5])
    actual = _strict(S.zeta)(x, q)
    torch.testing.assert_close(actual[0], S.zeta(x, q)[0])
    assert actual[1].isnan() and not S.zeta(x, q)[1].isnan()


POLYNOMIALS = [
    S.chebyshev_polynomial_t,
    S.chebyshev_polynomial_u,
    S.chebyshev_polynomial_v,
    S.chebyshev_polynomial_w,
    S.shifted_chebyshev_polynomial_t,
    S.shifted_chebyshev_polynomial_u,
    S.shifted_chebyshev_polynomial_v,
    S.shifted_chebyshev_polynomial_w,
    S.hermite_polynomial_h,
    S.hermite_polynomial_he,
    S.laguerre_polynomial_l,
    S.legendre_polynomial_p,
]
DEGREES = [-3.0, -0.5, 0.0, 0.7, 1.0, 1.9, 2.0, 3.0, 5.0, 6.0, 7.0, 8.0, 9.0, 12.0, 20.0, NAN, INF]


def _poly_grid(dtype):
    x = _grid(-1.5, 1.5, 61, dtype, edges=[0.0, 1.0, -1.0, 0.5, 2.0, -2.0, INF, -INF, NAN])
    return x[:, None], torch.tensor(DEGREES, dtype=dtype)[None, :]


@pytest.mark.parametrize("fn", POLYNOMIALS, ids=lambda f: f.__name__)
def test_orthogonal_polynomials_match_eager(fn):
    x, n = _poly_grid(torch.float32)
    # degree 20 in the trigonometric forms: f((n+1)θ)/sin θ moves by n ulps of θ (the f32
    # arccos of NumPy and of torch differ by an ulp), about 5e-6 at x = 0.3
    _assert_matches_eager(fn, x, n, dtype=torch.float32, atol=2e-5)


@pytest.mark.parametrize(
    "fn", [S.chebyshev_polynomial_v, S.legendre_polynomial_p], ids=lambda f: f.__name__
)
def test_orthogonal_polynomials_match_eager_in_f64_and_with_scalar_operands(fn):
    x, n = _poly_grid(torch.float64)
    _assert_matches_eager(fn, x, n, dtype=torch.float64)
    _assert_matches_eager(lambda n: fn(0.3, n), n, dtype=torch.float64)
    _assert_matches_eager(lambda x: fn(x, 7), x, dtype=torch.float64)


def test_chebyshev_degrees_past_the_unrolled_bound_use_the_closed_forms():
    x = torch.tensor([-1.2, -0.9, 0.3, 1.0, 1.1, 1.2], dtype=torch.float64)[:, None]
    n = torch.tensor([65.0, 80.0, 100.0], dtype=torch.float64)[None, :]
    for fn in POLYNOMIALS[:4]:
        actual = _strict(fn)(x, n)
        torch.testing.assert_close(actual, fn(x, n), rtol=1e-12, atol=1e-12)


def test_other_polynomials_are_nan_past_the_unrolled_bound_of_a_tensor_degree():
    x = torch.tensor([0.5], dtype=torch.float64)
    n = torch.tensor([64.0, 65.0], dtype=torch.float64)
    for fn in POLYNOMIALS[8:]:
        actual = _strict(fn)(x, n)
        torch.testing.assert_close(actual[0], fn(x, n)[0])
        assert actual[1].isnan()


def test_a_python_degree_is_unrolled_to_itself_up_to_256():
    x = torch.linspace(-1, 1, 9, dtype=torch.float64)
    _assert_matches_eager(lambda x: S.legendre_polynomial_p(x, 100), x, dtype=torch.float64)
    compiled = torch.compile(lambda x: S.legendre_polynomial_p(x, 300), backend="nkipy")
    with pytest.warns(FallbackWarning, match="degree 300 above 256"):
        actual = compiled(x)
    torch.testing.assert_close(actual, S.legendre_polynomial_p(x, 300))
