"""LU factorization with partial pivoting and what is built on it: ``linalg_lu_factor_ex``
(``linalg.lu_factor``, ``lu``), ``linalg_lu``, ``linalg_lu_solve`` (``lu_solve``),
``_linalg_solve_ex`` (``linalg.solve``), ``linalg_inv_ex``, ``_linalg_det`` and
``_linalg_slogdet`` (``linalg.slogdet``, ``logdet``), unrolled over the static matrix size
(``matrix_steps``; up to ``MAX_ORDER`` = 64 rows and columns).

Elimination is right-looking, one column per step, with LAPACK's pivot rule: the row of the
first entry of largest magnitude in the column (``idamax``) is swapped up, the multipliers are
the column times the pivot's reciprocal (``getrf2`` scales that way), and a zero pivot leaves
its column unscaled and sets ``info`` to its 1-based index if it is the first. ``pivots`` are
LAPACK's 1-based row swaps, so pivots, permutations and the signs of determinants match torch
whenever no two candidates tie within rounding. LAPACK orders the trailing-matrix sums
differently (recursively blocked), so entries agree to rounding, not bit for bit.

Solves apply the row swaps to the right-hand side and run a unit-lower then an upper
substitution; the adjoint and right-hand (``X A = B``) forms transpose. Inverses solve for the
identity. Determinants are the product of ``U``'s diagonal with the permutation's sign; a zero
pivot gives 0 (``slogdet``: sign 0 and ``-inf``), as LAPACK's factors do. Real floats only.
"""

from __future__ import annotations

import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .conventions import require
from .matrix_steps import (
    broadcast_batch,
    columns,
    diagonal,
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


def _swap(x, i: int, j, axis: int):
    """``x`` with entries ``i`` (static) and ``j`` (per batch, with ``axis`` kept at size 1)
    of ``axis`` (-2: rows of matrices, -1: entries of vectors) exchanged."""
    size = x.shape[axis]
    index = rows(size) if axis == -2 else knp.arange(size)
    at_j = knp.take_along_axis(
        x, knp.broadcast_to(j, x.shape[:axis] + (1,) + x.shape[axis:][1:]), axis
    )
    at_i = x[(..., slice(i, i + 1)) + (slice(None),) * (-axis - 1)]
    return knp.where(knp.equal(index, i), at_j, knp.where(knp.equal(index, j), at_i, x))


def lu_factor(a):
    """``LU`` (``L`` strictly below the diagonal, ``U`` on and above), 0-based pivot rows
    ``[..., k]`` (i64), the permutation ``perm`` with ``A[perm] = L U`` and ``info`` (i32)."""
    m, n = a.shape[-2:]
    require_real(a, "LU factorization")
    require_order(max(m, n), "LU factorization")
    batch = a.shape[:-2]
    row, column = rows(m), columns(n)
    perm = knp.broadcast_to(knp.arange(m), batch + (m,))
    info = knp.zeros(batch, DType.i32)
    pivots = []
    for k in range(min(m, n)):
        magnitude = knp.where(knp.greater_equal(row, k), knp.abs(a[..., :, k : k + 1]), -1)
        p = knp.expand_dims(knp.argmax(magnitude, axis=-2), -1)
        pivots.append(p[..., 0, 0])
        a = _swap(a, k, p, -2)
        perm = _swap(perm, k, p[..., 0], -1)
        pivot = a[..., k : k + 1, k : k + 1]
        singular = knp.equal(pivot, 0)
        info = knp.where(
            knp.logical_and(knp.equal(info, 0), singular[..., 0, 0]),
            knp.full((), k + 1, DType.i32),
            info,
        )
        below = knp.greater(row, k)
        multipliers = knp.where(
            knp.logical_and(below, knp.logical_not(singular)),
            knp.multiply(a[..., :, k : k + 1], knp.divide(1, pivot)),
            a[..., :, k : k + 1],
        )
        update = knp.subtract(a, knp.multiply(multipliers, a[..., k : k + 1, :]))
        a = knp.where(knp.logical_and(below, knp.greater(column, k)), update, a)
        a = knp.where(knp.logical_and(below, knp.equal(column, k)), multipliers, a)
    if not pivots:
        return a, knp.zeros(batch + (0,), DType.i64), perm, info
    return a, knp.stack(pivots, -1), perm, info


def _lapack_pivots(pivots):
    return knp.astype(knp.add(pivots, 1), DType.i32)


def _swaps_to_permutation(pivots, m: int):
    """The permutation ``perm`` of ``m`` rows (``A[perm] = L U``) that LAPACK's 1-based row
    swaps ``pivots`` make."""
    perm = knp.broadcast_to(knp.arange(m), pivots.shape[:-1] + (m,))
    for k in range(pivots.shape[-1]):
        swap = knp.subtract(knp.astype(pivots[..., k : k + 1], DType.i64), 1)
        perm = _swap(perm, k, swap, -1)
    return perm


def _permute_rows(x, perm):
    """``x[..., perm, :]`` batched: row ``i`` of the result is row ``perm[i]`` of ``x``."""
    index = knp.broadcast_to(knp.expand_dims(perm, -1), perm.shape + x.shape[-1:])
    return knp.take_along_axis(x, index, -2)


def _lu_solve(factors, perm, b, *, adjoint: bool = False):
    """``X`` with ``A X = B`` (``Aᵀ X = B`` when ``adjoint``) for ``A[perm] = L U``."""
    require_order(factors.shape[-1], "LU solve")
    factors, b = broadcast_batch(factors, b)
    perm = knp.broadcast_to(perm, factors.shape[:-1])
    if adjoint:
        y = substitute(mT(factors), b, lower=True)
        z = substitute(mT(factors), y, lower=False, unit=True)
        return _permute_rows(z, knp.argsort(perm, -1))
    y = substitute(factors, _permute_rows(b, perm), lower=True, unit=True)
    return substitute(factors, y, lower=False)


def _solve(factors, perm, b, *, left: bool, adjoint: bool = False):
    """``A X = B`` or, for ``left=False``, ``X A = B`` (``Aᵀ Xᵀ = Bᵀ``)."""
    if left:
        return _lu_solve(factors, perm, b, adjoint=adjoint)
    return mT(_lu_solve(factors, perm, mT(b), adjoint=not adjoint))


def _require_pivoting(pivot: bool) -> None:
    require(pivot, "LU factorization without pivoting (torch has it on CUDA only)")


@RULES.register(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(ctx, a, *, pivot=True, check_errors=False):
    _require_pivoting(pivot)
    factors, pivots, _, info = lu_factor(a)
    return factors, _lapack_pivots(pivots), info


def _unpack(factors, perm):
    """``P``, ``L``, ``U`` with ``A = P L U`` from ``A[perm] = L U``: ``P[perm[i], i] = 1``."""
    m, n = factors.shape[-2:]
    k = min(m, n)
    dtype = knp.dtype_of(factors)
    permutation = knp.astype(knp.equal(knp.expand_dims(perm, -2), rows(m)), dtype)
    lower = knp.add(triangle(factors[..., :, :k], lower=True, strict=True), eye(m, dtype)[:, :k])
    return permutation, lower, triangle(factors[..., :k, :], lower=False)


@RULES.register(aten.linalg_lu.default)
def linalg_lu(ctx, a, *, pivot=True):
    _require_pivoting(pivot)
    factors, _, perm, _ = lu_factor(a)
    return _unpack(factors, perm)


@RULES.register(aten.lu_unpack.default)
def lu_unpack(ctx, factors, pivots, unpack_data=True, unpack_pivots=True):
    """What is not unpacked is an empty tensor, as in torch."""
    require_real(factors, "LU unpacking")
    permutation, lower, upper = _unpack(factors, _swaps_to_permutation(pivots, factors.shape[-2]))
    empty = knp.zeros((0,), knp.dtype_of(factors))
    return (
        permutation if unpack_pivots else empty,
        lower if unpack_data else empty,
        upper if unpack_data else empty,
    )


@RULES.register(aten.linalg_lu_solve.default)
def linalg_lu_solve(ctx, factors, pivots, b, *, left=True, adjoint=False):
    require_real(factors, "LU solve")
    return _solve(
        factors, _swaps_to_permutation(pivots, factors.shape[-1]), b, left=left, adjoint=adjoint
    )


@RULES.register(aten._linalg_solve_ex.default)
def linalg_solve_ex(ctx, a, b, *, left=True, check_errors=False):
    """A vector ``B`` is one of shape ``[n]`` or ``A``'s batch then ``[n]`` (torch's rule).
    ``LU`` and ``pivots`` are those of ``A`` (broadcast to the batch), which the backward reads."""
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    factors, pivots, perm, info = lu_factor(knp.broadcast_to(a, ctx.out[1].shape))
    x = _solve(factors, perm, knp.expand_dims(b, -1) if vector else b, left=left)
    return knp.reshape(x, ctx.out[0].shape), factors, _lapack_pivots(pivots), info


@RULES.register(aten.linalg_inv_ex.default)
def linalg_inv_ex(ctx, a, *, check_errors=False):
    factors, _, perm, info = lu_factor(a)
    return _lu_solve(factors, perm, eye(a.shape[-1], knp.dtype_of(a))), info


def _permutation_sign(pivots, dtype):
    """``(-1)^(number of actual swaps)`` of 0-based pivot rows."""
    swaps = knp.sum(knp.astype(knp.not_equal(pivots, knp.arange(pivots.shape[-1])), DType.i32), -1)
    return knp.subtract(1, knp.multiply(knp.astype(knp.remainder(swaps, 2), dtype), 2))


def _det_operand(ctx, a):
    """The matrix whose ``LU`` and ``pivots`` the determinants return: torch factors ``Aᵀ``
    (same determinant, no copy into column-major order) when ``A`` is contiguous, and its
    backward solves with the adjoint accordingly; a layout not known is taken as contiguous."""
    layout = ctx.layouts[0] if ctx.layouts else None
    return mT(a) if layout is None or layout.contiguous else a


@RULES.register(aten._linalg_det.default)
def linalg_det(ctx, a):
    factors, pivots, _, _ = lu_factor(_det_operand(ctx, a))
    dtype = knp.dtype_of(a)
    det = knp.multiply(knp.prod(diagonal(factors), -1), _permutation_sign(pivots, dtype))
    return det, factors, _lapack_pivots(pivots)


@RULES.register(aten._linalg_slogdet.default)
def linalg_slogdet(ctx, a):
    factors, pivots, _, _ = lu_factor(_det_operand(ctx, a))
    u = diagonal(factors)
    sign = knp.multiply(knp.prod(knp.sign(u), -1), _permutation_sign(pivots, knp.dtype_of(a)))
    logabsdet = knp.sum(knp.log(knp.abs(u)), -1)
    return sign, logabsdet, factors, _lapack_pivots(pivots)
