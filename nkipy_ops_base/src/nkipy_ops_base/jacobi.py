"""Jacobi rotations in parallel order, shared by the symmetric eigensolver and the SVD
(``lowerings_spectral``).

A sweep visits every pair of indices once, in ``n - 1`` rounds (``n`` rounded up to even) of
disjoint pairs: the round-robin tournament (index 0 stays, the others rotate one place per
round; with odd ``n``, whoever meets the phantom index sits the round out). The rotations of a
round commute, so one round is one orthogonal matrix ``J`` built from per-pair cosines and
sines, applied with matrix products: ``n - 1`` steps per sweep instead of ``n(n-1)/2``.

The rotation that zeroes ``a_pq`` of a symmetric 2×2 block is Rutishauser's:
``θ = (a_qq - a_pp) / (2 a_pq)``, ``t = sign(θ) / (|θ| + √(θ² + 1))``, ``c = 1/√(t² + 1)``,
``s = t c``; it is the smaller of the two angles, which is what makes cyclic Jacobi converge
(quadratically once the off-diagonal part is small). A zero ``a_pq`` gives the identity.

``SWEEPS`` is fixed, since the kernel cannot loop until convergence: 10 sweeps take the
off-diagonal mass of matrices up to ``MAX_JACOBI_ORDER`` = 32 well below f64 rounding (cyclic
Jacobi typically needs 5 to 8 at that size; the margin covers clustered eigenvalues). Each
sweep costs ``n - 1`` rounds of a few ops and two ``n×n`` products, so 32 keeps a kernel to a
few thousand ops; larger matrices are declined.
"""

from __future__ import annotations

import numpy as np

from nkipy_core import knp

from .conventions import require
from .matrix_steps import eye

SWEEPS = 10
MAX_JACOBI_ORDER = 32


def require_jacobi_order(n: int, what: str) -> None:
    require(
        n <= MAX_JACOBI_ORDER,
        f"{what} of a matrix of size {n}: Jacobi sweeps are unrolled up to size {MAX_JACOBI_ORDER}",
    )


def rounds(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The round-robin rounds of one sweep: per round, the ``p`` and ``q`` indices
    (``p < q``) of its disjoint pairs."""
    players = list(range(n + n % 2))
    out = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [
            tuple(sorted((players[i], players[-1 - i])))
            for i in range(half)
            if max(players[i], players[-1 - i]) < n
        ]
        if pairs:
            out.append((np.array([p for p, _ in pairs]), np.array([q for _, q in pairs])))
        players = [players[0], players[-1], *players[1:-1]]
    return out


def rotation(app, aqq, apq):
    """Cosines and sines of the rotations that zero ``apq`` (all ``[..., pairs]``)."""
    nonzero = knp.not_equal(apq, 0)
    theta = knp.divide(knp.subtract(aqq, app), knp.multiply(knp.where(nonzero, apq, 1), 2))
    sign = knp.where(knp.signbit(theta), -1, 1)
    t = knp.divide(sign, knp.add(knp.abs(theta), knp.sqrt(knp.add(knp.multiply(theta, theta), 1))))
    t = knp.where(nonzero, t, 0)
    c = knp.rsqrt(knp.add(knp.multiply(t, t), 1))
    return c, knp.multiply(t, c)


def rotation_matrix(c, s, p: np.ndarray, q: np.ndarray, n: int):
    """``J`` ``[..., n, n]``: the identity with ``J[p,p] = J[q,q] = c``, ``J[p,q] = s`` and
    ``J[q,p] = -s`` for each pair, so that ``Jᵀ A J`` applies the round's rotations."""
    role = np.zeros((n, n), np.int64)  # 0: identity, 1: cosine, 2: sine, 3: minus sine
    pair = np.zeros((n, n), np.int64)
    for k, (i, j) in enumerate(zip(p, q, strict=True)):
        role[i, i] = role[j, j] = 1
        role[i, j], role[j, i] = 2, 3
        pair[i, i] = pair[j, j] = pair[i, j] = pair[j, i] = k
    batch = c.shape[:-1]
    cos = knp.reshape(knp.take(c, pair.reshape(-1), axis=-1), batch + (n, n))
    sin = knp.reshape(knp.take(s, pair.reshape(-1), axis=-1), batch + (n, n))
    identity = eye(n, knp.dtype_of(c))
    return knp.where(
        knp.asarray(role == 1),
        cos,
        knp.where(
            knp.asarray(role == 2),
            sin,
            knp.where(knp.asarray(role == 3), knp.negative(sin), identity),
        ),
    )
