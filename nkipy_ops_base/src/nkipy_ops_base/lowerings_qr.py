"""QR factorization by Householder reflections: ``linalg_qr`` (``linalg.qr``, ``qr``),
``geqrf`` (the compact form), ``linalg_householder_product`` (``orgqr``) and ``ormqr``
(applying ``Q`` or ``Qᵀ`` from either side without forming it), unrolled over the static
matrix size (``matrix_steps``; up to ``MAX_ORDER`` = 64 rows and columns). Real floats only.

Reflectors are LAPACK's (``geqrf``/``larfg``): for the column ``x = (α, x₂)`` below the
diagonal, ``β = -sign(α)·‖x‖``, ``τ = (β - α)/β`` and ``v = (1, x₂/(α - β))``, so
``(I - τ v vᵀ) x = β e₁``; when ``x₂`` is zero there is no reflection (``τ = 0``) and the
diagonal keeps ``α``. R's diagonal therefore has LAPACK's signs, which makes ``Q`` and ``R``
match torch's (QR is unique only up to those signs). ``Q`` is the product of the reflectors
applied to the identity from the last one back (``orgqr``). ‖x‖ is computed without LAPACK's
scaling against overflow, so columns with entries past ~1e19 (f32) overflow.
"""

from __future__ import annotations

import torch

from nkipy_core import knp

from .conventions import require
from .matrix_steps import columns, eye, mT, require_order, require_real, rows, triangle
from .rules import RULES

aten = torch.ops.aten


def _reflect(x, v, tau):
    """``(I - τ v vᵀ) X`` for reflector columns ``v`` ``[..., m, 1]`` and ``τ`` ``[..., 1, 1]``."""
    return knp.subtract(x, knp.multiply(knp.multiply(tau, v), knp.matmul(mT(v), x)))


def _reflector(packed, j: int):
    """The ``j``-th reflector's ``v`` ``[..., m, 1]`` read from the packed factor: 1 at ``j``,
    the stored entries below, zeros above."""
    row = rows(packed.shape[-2])
    column = packed[..., :, j : j + 1]
    return knp.where(
        knp.greater(row, j), column, knp.astype(knp.equal(row, j), knp.dtype_of(column))
    )


def householder_qr(a):
    """LAPACK's ``geqrf``: the packed factor (``R`` on and above the diagonal, the reflectors
    below) and ``τ`` ``[..., min(m, n)]``."""
    m, n = a.shape[-2:]
    require_real(a, "QR factorization")
    require_order(max(m, n), "QR factorization")
    row, column = rows(m), columns(n)
    taus = []
    for j in range(min(m, n)):
        x = a[..., :, j : j + 1]
        alpha = a[..., j : j + 1, j : j + 1]
        tail = knp.where(knp.greater(row, j), x, 0)
        tail_norm = knp.sqrt(knp.sum(knp.multiply(tail, tail), -2, keepdims=True))
        norm = knp.sqrt(knp.add(knp.multiply(alpha, alpha), knp.multiply(tail_norm, tail_norm)))
        beta = knp.where(knp.signbit(alpha), norm, knp.negative(norm))
        reflects = knp.not_equal(tail_norm, 0)
        safe_beta = knp.where(reflects, beta, 1)
        tau = knp.where(reflects, knp.divide(knp.subtract(beta, alpha), safe_beta), 0)
        scale = knp.where(reflects, knp.divide(1, knp.subtract(alpha, safe_beta)), 0)
        v = knp.where(knp.greater(row, j), knp.multiply(tail, scale), knp.equal(row, j))
        a = knp.where(knp.greater(column, j), _reflect(a, v, tau), a)
        diagonal = knp.where(reflects, beta, alpha)
        packed_column = knp.where(knp.equal(row, j), diagonal, knp.where(knp.greater(row, j), v, x))
        a = knp.where(knp.equal(column, j), packed_column, a)
        taus.append(tau[..., 0, 0])
    return a, taus


def apply_reflectors(packed, taus, c, transpose: bool):
    """``Q C`` (or ``Qᵀ C``) for ``Q = H₀ H₁ … H_{k-1}`` without forming ``Q``: the reflectors
    applied to ``C`` ``[..., m, n]`` one by one, from the last (or, for ``Qᵀ``, the first)."""
    order = range(len(taus)) if transpose else range(len(taus) - 1, -1, -1)
    for j in order:
        tau = knp.expand_dims(knp.expand_dims(taus[j], -1), -1)
        c = _reflect(c, _reflector(packed, j), tau)
    return c


def reflectors_product(packed, taus, n_columns: int):
    """The first ``n_columns`` columns of ``H₀ H₁ … H_{k-1}`` (LAPACK's ``orgqr``)."""
    m = packed.shape[-2]
    q = knp.broadcast_to(
        eye(m, knp.dtype_of(packed))[:, :n_columns], packed.shape[:-2] + (m, n_columns)
    )
    return apply_reflectors(packed, taus, q, transpose=False)


def _taus(tau):
    """``τ`` ``[..., k]`` as the list of its ``k`` columns ``[...]``."""
    return [tau[..., j] for j in range(tau.shape[-1])]


@RULES.register(aten.geqrf.default)
def geqrf(ctx, a):
    """The packed factor and ``τ`` ``[..., min(m, n)]``, as LAPACK returns them."""
    packed, taus = householder_qr(a)
    if not taus:
        return packed, knp.zeros(a.shape[:-2] + (0,), knp.dtype_of(a))
    return packed, knp.stack(taus, axis=-1)


@RULES.register(aten.linalg_qr.default)
def linalg_qr(ctx, a, mode="reduced"):
    """``mode``: ``reduced`` (``Q`` ``m×k``, ``R`` ``k×n``), ``complete`` (``Q`` ``m×m``) or
    ``r`` (``R`` only; ``Q`` is an empty tensor, as in torch)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    packed, taus = householder_qr(a)
    if mode == "complete":
        return reflectors_product(packed, taus, m), triangle(packed, lower=False)
    r = triangle(packed[..., :k, :], lower=False)
    if mode == "r":
        return knp.zeros((0,), knp.dtype_of(a)), r
    return reflectors_product(packed, taus, k), r


@RULES.register(aten.linalg_householder_product.default)
def linalg_householder_product(ctx, a, tau):
    """``H₀ … H_{k-1}`` restricted to ``A``'s ``n`` columns, from reflectors stored below the
    diagonal of ``A`` ``[..., m, n]`` and ``τ`` ``[..., k]``."""
    require_real(a, "Householder product")
    require_order(max(a.shape[-2:]), "Householder product")
    require(tau.shape[:-1] == a.shape[:-2], "Householder product with broadcast batches")
    return reflectors_product(a, _taus(tau), a.shape[-1])


@RULES.register(aten.ormqr.default)
def ormqr(ctx, a, tau, c, left=True, transpose=False):
    """``Q C``, ``Qᵀ C``, ``C Q`` or ``C Qᵀ`` for the ``Q`` of the reflectors below the
    diagonal of ``A`` ``[..., m, k]`` and ``τ`` ``[..., k]`` (LAPACK's ``ormqr``). ``Q`` is
    never formed: the reflectors are applied to ``C`` in turn (the right-hand cases through
    ``C Q = (Qᵀ Cᵀ)ᵀ``)."""
    require_real(a, "ormqr")
    require_order(max(a.shape[-2:] + c.shape[-2:]), "ormqr")
    require(tau.shape[:-1] == a.shape[:-2] == c.shape[:-2], "ormqr with broadcast batches")
    if left:
        return apply_reflectors(a, _taus(tau), c, transpose)
    return mT(apply_reflectors(a, _taus(tau), mT(c), not transpose))
