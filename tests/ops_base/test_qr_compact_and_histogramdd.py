"""``geqrf`` and ``ormqr`` (LAPACK's compact QR and applying its Q) and ``histogramdd``
compiled in strict mode against eager: every side and transpose of ``ormqr`` and its backward,
rank-deficient and non-finite matrices, histograms with data ranges, given ranges and edges,
weights, density and out-of-range, infinite and NaN points, and the bounds past which they
decline.
"""

from __future__ import annotations

import pytest
import torch

_generator = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.float64):
    return torch.randn(shape, generator=_generator, dtype=dtype)


def strict(fn):
    torch.compiler.reset()
    return torch.compile(fn, backend="nkipy", options={"strict": True})


def assert_matches(fn, *args, rtol=1e-6, atol=1e-6):
    torch.testing.assert_close(strict(fn)(*args), fn(*args), rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 5), (4, 4)])
def test_geqrf_matches_lapack(shape):
    assert_matches(torch.geqrf, randn(*shape))


def test_geqrf_of_rank_deficient_and_non_finite_matrices():
    a = randn(4, 3)
    a[:, 1] = 0.0  # a zero column: no reflection, tau = 0
    a[2:, 0] = 0.0  # nothing below the diagonal in column 0 past row 1
    assert_matches(torch.geqrf, a)
    b = randn(3, 3)
    b[1, 0] = float("inf")
    b[2, 2] = float("nan")
    assert_matches(torch.geqrf, b)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [True, False])
def test_ormqr_applies_q_from_either_side(left, transpose):
    a, tau = torch.geqrf(randn(2, 5, 3))
    c = randn(2, 5, 4) if left else randn(2, 4, 5)
    assert_matches(lambda a, tau, c: torch.ormqr(a, tau, c, left, transpose), a, tau, c)


def test_ormqr_backward_matches_eager():
    a, tau = torch.geqrf(randn(4, 4))
    inputs = [t.clone().requires_grad_() for t in (a, tau, randn(4, 3))]

    def grads(fn):
        args = [t.detach().clone().requires_grad_() for t in inputs]
        fn(*args).square().sum().backward()
        return [t.grad for t in args]

    def fn(a, tau, c):
        return torch.ormqr(a, tau, c, left=True, transpose=True)

    torch.testing.assert_close(grads(strict(fn)), grads(fn), rtol=1e-6, atol=1e-6)


def test_qr_ops_decline_past_the_size_bound():
    a = randn(65, 3)
    with pytest.raises(Exception, match="unrolled up to size 64") as raised:
        strict(torch.geqrf)(a)
    assert "UnsupportedOpsError" in str(raised.value)
    small, tau = torch.geqrf(randn(4, 3))
    with pytest.raises(Exception, match="unrolled up to size 64"):
        strict(torch.ormqr)(small, tau, randn(4, 65))


def _histogramdd(**kwargs):
    return lambda x, *rest: tuple(torch.histogramdd(x, *rest, **kwargs))


def test_histogramdd_with_bin_counts_matches_eager():
    x = randn(3, 40, 2) * 3
    assert_matches(_histogramdd(bins=[4, 3]), x)
    assert_matches(_histogramdd(bins=[4, 3], density=True), x)
    weight = randn(3, 40).abs()
    assert_matches(
        lambda x, w: tuple(torch.histogramdd(x, [2, 5], range=[-1.0, 1.0, 0.0, 4.0], weight=w)),
        x,
        weight,
    )


def test_histogramdd_counts_edge_values_like_eager():
    x = torch.tensor(
        [[0.0, 1.0], [-1.0, 0.5], [1.0, 1.0], [5.0, 0.0], [float("inf"), 0.5], [float("nan"), 1.0]],
        dtype=torch.float64,
    )
    # the range is given: out-of-range, infinite and NaN points are not counted
    assert_matches(_histogramdd(bins=[2, 2], range=[-1.0, 1.0, 0.0, 1.0]), x)
    # an empty data range is widened by 0.5 on each side
    assert_matches(_histogramdd(bins=[3, 1]), torch.full((4, 2), 7.0, dtype=torch.float64))


def test_histogramdd_with_given_edges_matches_eager():
    x = randn(30, 2)
    edges = [
        torch.tensor([-2.0, -0.5, 0.0, 3.0], dtype=torch.float64),
        torch.tensor([-1.0, 1.0], dtype=torch.float64),
    ]
    weight = randn(30)
    assert_matches(
        lambda x, e0, e1, w: tuple(torch.histogramdd(x, [e0, e1], weight=w, density=True)),
        x,
        *edges,
        weight,
    )


def test_histogramdd_with_given_edges_declines_past_the_pair_bound():
    x = randn(2**13, 1, dtype=torch.float32)
    edges = torch.linspace(-1, 1, 2**11 + 1)
    with pytest.raises(Exception, match="limit 16777216 pairs"):
        strict(lambda x, e: torch.histogramdd(x, [e]).hist)(x, edges)
