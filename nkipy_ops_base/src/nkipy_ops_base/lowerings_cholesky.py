"""Cholesky factorization and triangular solves: ``linalg_cholesky_ex`` (``linalg.cholesky``),
``cholesky``, ``linalg_solve_triangular``, ``triangular_solve``, ``cholesky_solve`` and
``cholesky_inverse``, unrolled over the static matrix size (``matrix_steps``; up to
``MAX_ORDER`` = 64 rows).

The factorization goes column by column (left-looking): column ``j`` of ``L`` is
``(A[:, j] - L L[j, :]ᵀ) / √d`` below the diagonal, where ``d`` is that vector's ``j``-th entry.
It is the same arithmetic as LAPACK's ``potrf`` up to the order of the sums, so the results
agree to rounding. Only the triangle LAPACK reads is used (the lower one, or the upper one for
``upper=True``). ``info`` is LAPACK's: the first (1-based) column whose ``d`` is not positive
(or is NaN), 0 when ``A`` is positive definite; past that column ``L`` holds NaNs where LAPACK
leaves partial results (torch documents them as unspecified).
"""

from __future__ import annotations

import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .matrix_steps import (
    columns,
    eye,
    mT,
    require_order,
    require_real,
    rows,
    substitute,
    triangle,
)
from .rules import RULES

aten = torch.ops.aten


def _cholesky_lower(a):
    """``L`` and ``info`` for the lower triangle of ``a`` ``[..., n, n]``."""
    n = a.shape[-1]
    require_order(n, "Cholesky factorization")
    a = triangle(a, lower=True)
    factor = knp.zeros(a.shape, knp.dtype_of(a))
    info = knp.zeros(a.shape[:-2], DType.i32)
    below = rows(n)
    for j in range(n):
        v = knp.subtract(a[..., :, j : j + 1], knp.matmul(factor, mT(factor[..., j : j + 1, :])))
        d = v[..., j : j + 1, :]
        failed = knp.logical_and(knp.equal(info, 0), knp.logical_not(knp.greater(d[..., 0, 0], 0)))
        info = knp.where(failed, knp.full((), j + 1, DType.i32), info)
        column = knp.where(knp.greater_equal(below, j), knp.divide(v, knp.sqrt(d)), 0)
        factor = knp.where(knp.equal(columns(n), j), column, factor)
    return factor, info


@RULES.register(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(ctx, a, *, upper=False, check_errors=False):
    require_real(a, "Cholesky factorization")
    if upper:
        factor, info = _cholesky_lower(mT(a))
        return mT(factor), info
    return _cholesky_lower(a)


@RULES.register(aten.cholesky.default)
def cholesky(ctx, a, upper=False):
    """The deprecated form, without ``info``."""
    return linalg_cholesky_ex(ctx, a, upper=upper)[0]


def _solve_triangular(a, b, *, upper: bool, left: bool = True, unit: bool = False):
    """``A X = B`` (``left``) or ``X A = B``; the right-hand form solves ``Aᵀ Xᵀ = Bᵀ``."""
    require_real(a, "triangular solve")
    require_order(a.shape[-1], "triangular solve")
    if left:
        return substitute(a, b, lower=not upper, unit=unit)
    return mT(substitute(mT(a), mT(b), lower=upper, unit=unit))


@RULES.register(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(ctx, a, b, *, upper, left=True, unitriangular=False):
    return _solve_triangular(a, b, upper=upper, left=left, unit=unitriangular)


@RULES.register(aten.triangular_solve.default)
def triangular_solve(ctx, b, a, upper=True, transpose=False, unitriangular=False):
    """The deprecated form: ``A X = B`` or ``Aᵀ X = B``, and a copy of ``A`` broadcast to the
    batch of the solution."""
    if transpose:
        x = _solve_triangular(mT(a), b, upper=not upper, unit=unitriangular)
    else:
        x = _solve_triangular(a, b, upper=upper, unit=unitriangular)
    return x, knp.broadcast_to(a, ctx.out[1].shape)


def _cholesky_solve(b, factor, upper: bool):
    """``X`` with ``(L Lᵀ) X = B`` (``U`` with ``Uᵀ U`` when ``upper``): two substitutions."""
    lower = mT(factor) if upper else factor
    y = _solve_triangular(lower, b, upper=False)
    return _solve_triangular(mT(lower), y, upper=True)


@RULES.register(aten.cholesky_solve.default)
def cholesky_solve(ctx, b, factor, upper=False):
    return _cholesky_solve(b, factor, upper)


@RULES.register(aten.cholesky_inverse.default)
def cholesky_inverse(ctx, factor, upper=False):
    n = factor.shape[-1]
    return _cholesky_solve(eye(n, knp.dtype_of(factor)), factor, upper)
