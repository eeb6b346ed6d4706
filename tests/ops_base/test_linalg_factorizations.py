"""Matrix factorizations compiled in strict mode against eager: Cholesky, triangular solves, LU
(pivots, ``info``, determinants), QR, the Jacobi eigen/singular value solvers, ``pinv`` and
``matrix_exp``, on well-conditioned, singular, non-definite and non-finite inputs, and the
size past which the unrolled algorithms decline.
"""

from __future__ import annotations

import pytest
import torch

_generator = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.float64):
    return torch.randn(shape, generator=_generator, dtype=dtype)


def spd(*shape, dtype=torch.float64):
    a = randn(*shape, dtype=dtype)
    return a @ a.mT + shape[-1] * torch.eye(shape[-1], dtype=dtype)


def strict(fn):
    torch.compiler.reset()
    return torch.compile(fn, backend="nkipy", options={"strict": True})


def assert_matches(fn, *args, rtol=1e-6, atol=1e-6):
    torch.testing.assert_close(strict(fn)(*args), fn(*args), rtol=rtol, atol=atol, equal_nan=True)


def test_cholesky_and_triangular_solves_match_eager():
    a, b = spd(2, 4, 4), randn(2, 4, 3)

    def fn(a, b):
        lower, info = torch.linalg.cholesky_ex(a)
        upper, _ = torch.linalg.cholesky_ex(a, upper=True)
        right = torch.linalg.solve_triangular(upper, b.mT, upper=True, left=False)
        return (
            lower,
            upper,
            info,
            right,
            torch.cholesky_solve(b, lower),
            torch.cholesky_inverse(lower),
        )

    assert_matches(fn, a, b)


def test_cholesky_info_names_the_first_column_that_is_not_positive():
    a = spd(3, 4, 4)
    a[1, 2, 2] = -50.0  # fails at column 3
    a[2, 0, 0] = float("nan")  # fails at column 1
    info = strict(lambda a: torch.linalg.cholesky_ex(a).info)(a)
    assert info.tolist() == torch.linalg.cholesky_ex(a).info.tolist() == [0, 3, 1]


def test_lu_pivots_and_info_match_lapack_on_singular_and_rectangular_matrices():
    square = randn(3, 4, 4)
    square[1, :, 2] = 0.0  # an all-zero column: info 3, the column stays unscaled
    square[2, 3] = square[2, 0]  # two equal rows
    tall, wide = randn(6, 4), randn(3, 5)

    def fn(square, tall, wide):
        return (
            torch.linalg.lu_factor_ex(square),
            torch.linalg.lu(tall),
            torch.linalg.lu(wide),
            torch.lu_unpack(*torch.linalg.lu_factor_ex(tall)[:2]),
        )

    assert_matches(fn, square, tall, wide, atol=1e-9)


def test_determinants_signs_and_solves_match_eager():
    a, b = randn(4, 4, 4), randn(4, 4, 2)
    a[1] = 0.0  # singular: det 0, slogdet (0, -inf)
    a[2, 1] = a[2, 3]  # singular by rounding: sign and magnitude follow the pivots

    def fn(a, b):
        lu, pivots = torch.linalg.lu_factor(a[[0, 3]])
        return (
            torch.linalg.det(a),
            torch.linalg.slogdet(a[[0, 1, 3]]),  # a[2]'s sign is rounding's choice
            torch.logdet(a[0] @ a[0].mT),
            torch.linalg.solve_ex(a[[0, 3]], b[[0, 3]]),
            torch.linalg.solve(a[0], b[0, :, 0]),
            torch.linalg.solve(a[3], b[3].mT, left=False),
            torch.linalg.inv_ex(a[[0, 3]]),
            torch.linalg.lu_solve(lu, pivots, b[[0, 3]], adjoint=True),
        )

    assert_matches(fn, a, b, rtol=1e-6, atol=1e-8)


def test_inverse_reports_singularity_in_info():
    a = randn(2, 3, 3)
    a[1, :, 0] = 0.0
    info = strict(lambda a: torch.linalg.inv_ex(a).info)(a)
    assert info.tolist() == torch.linalg.inv_ex(a).info.tolist() == [0, 1]


@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_has_lapack_signs(mode):
    a = randn(2, 5, 3)
    a[1, 1:, 0] = 0.0  # nothing to reflect in column 0: R keeps its sign
    a[1, 0, 0] = -2.0
    assert_matches(lambda a: torch.linalg.qr(a, mode=mode), a, atol=1e-9)


def test_householder_product_matches_eager():
    a, tau = torch.geqrf(randn(5, 4))
    assert_matches(torch.linalg.householder_product, a, tau, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_jacobi_eigh_and_svd_match_eager_up_to_sign(dtype):
    a = randn(2, 4, 4, dtype=dtype)
    wide = randn(3, 5, dtype=dtype)
    tol = 1e-4 if dtype == torch.float32 else 1e-10

    def fn(a, wide):
        values, vectors = torch.linalg.eigh(a, UPLO="U")
        u, s, vh = torch.linalg.svd(wide, full_matrices=False)
        return values, vectors.abs(), s, u.abs(), vh.abs(), u @ torch.diag_embed(s) @ vh

    assert_matches(fn, a, wide, rtol=tol, atol=tol)


def test_pinv_of_rank_deficient_and_hermitian_matrices():
    a = randn(5, 2) @ randn(2, 4)  # rank 2
    h = randn(4, 4)
    h = h + h.mT

    def fn(a, h):
        return torch.linalg.pinv(a), torch.linalg.pinv(h, hermitian=True)

    assert_matches(fn, a, h, atol=1e-9)


def test_matrix_exp_scales_and_squares():
    a = torch.stack([randn(4, 4) * 20, torch.zeros(4, 4), randn(4, 4) * 1e-3])
    rotation = torch.tensor([[0.0, -30.0], [30.0, 0.0]], dtype=torch.float64)
    assert_matches(torch.linalg.matrix_exp, a, rtol=1e-9, atol=1e-9)
    assert_matches(torch.linalg.matrix_exp, rotation, rtol=1e-9, atol=1e-9)


def test_non_finite_entries_propagate_like_eager():
    a = randn(3, 3)
    a[0, 0] = float("inf")
    assert_matches(torch.linalg.det, a)
    b = randn(3, 3)
    b[1, 2] = float("nan")
    assert_matches(lambda b: torch.linalg.solve_triangular(b, b, upper=False), b)


@pytest.mark.parametrize(
    ("fn", "n", "reason"),
    [
        (lambda a: torch.linalg.cholesky_ex(a).L, 65, "unrolled up to size 64"),
        (torch.linalg.det, 65, "unrolled up to size 64"),
        (torch.linalg.eigvalsh, 33, "Jacobi sweeps are unrolled up to size 32"),
    ],
)
def test_large_matrices_are_declined_with_the_size_bound(fn, n, reason):
    with pytest.raises(Exception, match=reason) as raised:
        strict(fn)(spd(n, n))
    assert "UnsupportedOpsError" in str(raised.value)


def test_the_host_check_of_info_still_raises_torchs_error():
    a = spd(3, 3)
    a[1, 1] = -1.0
    with pytest.raises(torch.linalg.LinAlgError, match="order 2 is not positive-definite"):
        strict(torch.linalg.cholesky)(a)


def test_determinant_gradients_read_the_factors_torch_returns():
    """torch factors ``Aᵀ`` of a contiguous ``A`` in ``det``/``slogdet`` and its backward solves
    with that LU; a transposed ``A`` is factored as it is."""
    a = randn(2, 4, 4).requires_grad_()
    weights = torch.tensor([1.0, 2.0], dtype=torch.float64)
    for fn in (
        torch.linalg.det,
        lambda a: torch.linalg.slogdet(a).logabsdet,
        lambda a: torch.linalg.det(a.mT * 1.0),
    ):

        def loss(a, fn=fn):
            return (fn(a) * weights).sum()

        (expected,) = torch.autograd.grad(loss(a), a)
        (got,) = torch.autograd.grad(strict(loss)(a), a)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
