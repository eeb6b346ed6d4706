"""Spectral decompositions by Jacobi rotations (``jacobi``): ``_linalg_eigh``
(``linalg.eigh``, ``linalg.eigvalsh``), ``_linalg_svd`` (``linalg.svd``, ``linalg.svdvals``,
``svd``) and ``linalg_pinv`` on them. Real floats, matrices up to ``MAX_JACOBI_ORDER`` = 32.

* **eigh**: two-sided cyclic Jacobi on the symmetric matrix built from the triangle ``UPLO``
  names, accumulating the rotations into the eigenvectors; eigenvalues come out ascending, as
  LAPACK's. Jacobi is at least as accurate as LAPACK's tridiagonal QR (small relative errors
  for well-conditioned eigenvalues).
* **svd**: one-sided Jacobi (Hestenes) on the columns of ``A`` (of ``Aᵀ`` when ``A`` is wide):
  rotations orthogonalise column pairs, the singular values are the final column norms
  (descending, as LAPACK's), ``V`` accumulates the rotations and ``U`` is the normalised
  columns. It keeps the small singular values' relative accuracy (no ``AᵀA`` is formed). A
  column whose singular value is exactly 0 gives a zero column of ``U`` where LAPACK completes
  an orthonormal basis, and ``full_matrices`` is supported for square matrices only.
* **pinv**: ``V diag(1/σ) Uᵀ`` over the singular values above ``max(atol, rtol·σ_max)``
  (torch's default ``rtol`` is ``eps·max(m, n)`` when neither is given); ``hermitian`` uses the
  eigendecomposition and ``|λ|``.

Eigenvectors and singular vectors are unique only up to sign (and within repeated values), so
they match torch's up to that gauge; everything built from them (projectors, ``pinv``,
reconstructions, gradients of gauge-invariant functions) matches to rounding.
"""

from __future__ import annotations

import math

import torch

from nkipy_core import knp

from .conventions import require
from .jacobi import SWEEPS, require_jacobi_order, rotation, rotation_matrix, rounds
from .matrix_steps import diagonal, eye, mT, require_real, triangle
from .rules import RULES

aten = torch.ops.aten


def _pair_entries(a, p, q):
    """``a[..., p_k, q_k]`` for the static index arrays ``p``, ``q``."""
    n = a.shape[-1]
    flat = knp.reshape(a, a.shape[:-2] + (n * n,))
    return knp.take(flat, p * n + q, axis=-1)


def _sort_columns(values, vectors, descending: bool):
    order = knp.argsort(values, -1, descending=descending)
    index = knp.broadcast_to(knp.expand_dims(order, -2), vectors.shape)
    return knp.take_along_axis(values, order, -1), knp.take_along_axis(vectors, index, -1)


def symmetric_eigen(a):
    """Eigenvalues (ascending) and eigenvectors (columns) of symmetric ``a`` ``[..., n, n]``."""
    n = a.shape[-1]
    vectors = knp.broadcast_to(eye(n, knp.dtype_of(a)), a.shape)
    for _ in range(SWEEPS):
        for p, q in rounds(n):
            d = diagonal(a)
            c, s = rotation(
                knp.take(d, p, axis=-1), knp.take(d, q, axis=-1), _pair_entries(a, p, q)
            )
            j = rotation_matrix(c, s, p, q, n)
            a = knp.matmul(mT(j), knp.matmul(a, j))
            vectors = knp.matmul(vectors, j)
    return _sort_columns(diagonal(a), vectors, descending=False)


def singular_decomposition(a):
    """``U`` ``[..., m, n]``, ``σ`` (descending) and ``V`` ``[..., n, n]`` of ``a`` with
    ``m >= n``, by one-sided Jacobi."""
    n = a.shape[-1]
    vectors = knp.broadcast_to(eye(n, knp.dtype_of(a)), a.shape[:-2] + (n, n))
    for _ in range(SWEEPS):
        for p, q in rounds(n):
            left, right = knp.take(a, p, axis=-1), knp.take(a, q, axis=-1)
            c, s = rotation(
                knp.sum(knp.multiply(left, left), -2),
                knp.sum(knp.multiply(right, right), -2),
                knp.sum(knp.multiply(left, right), -2),
            )
            j = rotation_matrix(c, s, p, q, n)
            a = knp.matmul(a, j)
            vectors = knp.matmul(vectors, j)
    sigma = knp.sqrt(knp.sum(knp.multiply(a, a), -2))
    u = knp.divide(a, knp.expand_dims(knp.where(knp.equal(sigma, 0), 1, sigma), -2))
    order = knp.argsort(sigma, -1, descending=True)
    sigma, vectors = _sort_columns(sigma, vectors, descending=True)
    index = knp.broadcast_to(knp.expand_dims(order, -2), u.shape)
    return knp.take_along_axis(u, index, -1), sigma, vectors


def _svd(a):
    """``U`` ``[..., m, k]``, ``σ`` ``[..., k]``, ``V`` ``[..., n, k]`` (reduced)."""
    m, n = a.shape[-2:]
    require_real(a, "singular value decomposition")
    require_jacobi_order(max(m, n), "singular value decomposition")
    if m >= n:
        return singular_decomposition(a)
    v, sigma, u = singular_decomposition(mT(a))
    return u, sigma, v


def _symmetrized(a, uplo: str):
    """The symmetric matrix whose ``uplo`` triangle is ``a``'s."""
    lower = uplo.upper() == "L"
    return knp.add(triangle(a, lower), mT(triangle(a, lower, strict=True)))


def _zeros_like_outputs(ctx):
    """The node's outputs for an input without elements (no rotation to gather for)."""
    return tuple(knp.zeros(out.shape, out.dtype) for out in ctx.out)


@RULES.register(aten._linalg_eigh.default)
def linalg_eigh(ctx, a, UPLO="L", compute_v=True):  # noqa: N803 - ATen's argument name
    require_real(a, "symmetric eigendecomposition")
    if math.prod(a.shape) == 0:
        return _zeros_like_outputs(ctx)
    require_jacobi_order(a.shape[-1], "symmetric eigendecomposition")
    values, vectors = symmetric_eigen(_symmetrized(a, UPLO))
    if not compute_v:
        vectors = knp.zeros(ctx.out[1].shape, knp.dtype_of(a))
    return values, vectors


@RULES.register(aten._linalg_svd.default)
def linalg_svd(ctx, a, full_matrices=False, compute_uv=True, *, driver=None):
    m, n = a.shape[-2:]
    require(
        not (compute_uv and full_matrices) or m == n,
        "full_matrices SVD of a non-square matrix (its orthonormal completion is not computed)",
    )
    if math.prod(a.shape) == 0:
        return _zeros_like_outputs(ctx)
    u, sigma, v = _svd(a)
    if not compute_uv:
        dtype = knp.dtype_of(a)
        return knp.zeros(ctx.out[0].shape, dtype), sigma, knp.zeros(ctx.out[2].shape, dtype)
    return u, sigma, mT(v)


def _tolerance(a, largest, atol, rtol):
    """torch's cut-off ``max(atol, rtol·largest)``, with its defaults: ``atol`` 0, ``rtol``
    ``eps·max(m, n)`` unless given, or 0 when only a positive ``atol`` is."""
    dtype = knp.dtype_of(a)
    default_rtol = float(torch.finfo(dtype.torch).eps) * max(a.shape[-2:])
    if rtol is None:
        rtol = default_rtol if atol is None else knp.where(knp.greater(atol, 0), 0, default_rtol)
    atol = 0 if atol is None else atol
    return knp.maximum(
        knp.expand_dims(knp.astype(atol, dtype), -1),
        knp.multiply(knp.expand_dims(knp.astype(rtol, dtype), -1), largest),
    )


@RULES.register(aten.linalg_pinv.atol_rtol_tensor)
def linalg_pinv(ctx, a, *, atol=None, rtol=None, hermitian=False):
    require_real(a, "pseudo-inverse")
    if math.prod(a.shape) == 0:
        return knp.zeros(ctx.out.shape, knp.dtype_of(a))
    if hermitian:
        require_jacobi_order(a.shape[-1], "pseudo-inverse")
        values, vectors = symmetric_eigen(_symmetrized(a, "L"))
        magnitude = knp.abs(values)
        tol = _tolerance(a, knp.max(magnitude, -1, keepdims=True), atol, rtol)
        inverse = knp.where(knp.greater(magnitude, tol), knp.divide(1, values), 0)
        return knp.matmul(knp.multiply(vectors, knp.expand_dims(inverse, -2)), mT(vectors))
    u, sigma, v = _svd(a)
    tol = _tolerance(a, knp.max(sigma, -1, keepdims=True), atol, rtol)
    inverse = knp.where(knp.greater(sigma, tol), knp.divide(1, sigma), 0)
    return knp.matmul(knp.multiply(v, knp.expand_dims(inverse, -2)), mT(u))
