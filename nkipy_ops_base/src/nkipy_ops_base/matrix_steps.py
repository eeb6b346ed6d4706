"""Building blocks of the matrix algorithms that are unrolled over a static matrix size
(``lowerings_cholesky``, ``lowerings_lu``, ``lowerings_qr``, ``lowerings_spectral``,
``lowerings_matrix_exp``): index masks, diagonals, triangles and substitution, all batched over
leading dimensions.

Every algorithm here is a Python loop over the rows or columns of a matrix whose size is known
when the kernel is built: each step is a handful of whole-matrix IR ops (a masked update, a
matrix-vector product), so the work is the O(n³) of the textbook algorithm but the kernel grows
by a fixed number of ops per column. ``MAX_ORDER`` bounds that: past 64 columns the kernel
holds thousands of ops (and neuronx-cc's compile time grows with them) for a matrix that a
blocked host LAPACK factors faster, so larger matrices are declined and run on CPU.

Updates select with ``where`` rather than multiply by 0/1 masks, so that an infinite or NaN
entry outside the part a step touches never turns into NaN there.
"""

from __future__ import annotations

import numpy as np

from nkipy_core import knp

from .conventions import require

#: the largest matrix dimension the unrolled algorithms take (see the module docstring)
MAX_ORDER = 64


def require_order(n: int, what: str) -> None:
    """Decline matrices with more than ``MAX_ORDER`` rows or columns."""
    require(
        n <= MAX_ORDER,
        f"{what} of a matrix of size {n}: factorizations are unrolled up to size {MAX_ORDER}",
    )


def require_real(x, what: str) -> None:
    require(knp.dtype_of(x).is_float, f"{what} of {knp.dtype_of(x).value} (floats only)")


def rows(m: int):
    """``[m, 1]`` row indices (i64), to compare with a static or per-batch index."""
    return knp.reshape(knp.arange(m), (m, 1))


def columns(n: int):
    """``[1, n]`` column indices (i64)."""
    return knp.reshape(knp.arange(n), (1, n))


def mT(x):  # noqa: N802 - torch's name for the transpose of the last two dimensions
    """The transpose of the last two dimensions."""
    perm = list(range(x.ndim))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return knp.transpose(x, perm)


def diagonal(x):
    """``[..., min(m, n)]``: the main diagonal of ``[..., m, n]`` matrices (a strided slice of
    the flattened matrix, so no product with an identity mixes other entries in)."""
    m, n = x.shape[-2:]
    flat = knp.reshape(x, x.shape[:-2] + (m * n,))
    return flat[..., 0 : min(m, n) * (n + 1) : n + 1]


def eye(n: int, dtype):
    return knp.astype(knp.equal(rows(n), columns(n)), dtype)


def triangle(x, lower: bool, strict: bool = False):
    """``x`` with the other triangle zeroed (the diagonal too when ``strict``)."""
    m, n = x.shape[-2:]
    offset = knp.subtract(rows(m), columns(n))
    keep = (knp.greater if strict else knp.greater_equal)(
        offset if lower else knp.negative(offset), 0
    )
    return knp.where(keep, x, knp.zeros((), knp.dtype_of(x)))


def broadcast_batch(a, b):
    """``a`` and ``b`` (stacks of matrices) broadcast to their common batch dimensions."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return knp.broadcast_to(a, batch + a.shape[-2:]), knp.broadcast_to(b, batch + b.shape[-2:])


def substitute(a, b, lower: bool, unit: bool = False):
    """``X`` with ``A X = B`` for triangular ``A`` ``[..., n, n]`` and ``B`` ``[..., n, k]``
    (batches broadcast), by forward (``lower``) or back substitution, one row per step.

    Only ``A``'s ``lower`` (or upper) triangle is read; ``unit`` takes its diagonal as ones.
    The rows of ``X`` not yet solved are zeros, so each step's product with the whole (strict)
    triangle adds only the solved ones. A zero on the diagonal gives infinities and NaNs, as
    LAPACK's ``trsm`` does.
    """
    n = a.shape[-1]
    a, b = broadcast_batch(a, b)
    pivots = diagonal(a)
    a = triangle(a, lower, strict=True)
    x = knp.zeros(b.shape, knp.dtype_of(b))
    index = rows(n)
    for i in range(n) if lower else range(n - 1, -1, -1):
        value = knp.subtract(b[..., i : i + 1, :], knp.matmul(a[..., i : i + 1, :], x))
        if not unit:
            value = knp.divide(value, knp.expand_dims(pivots[..., i : i + 1], -1))
        x = knp.where(knp.equal(index, i), value, x)
    return x
