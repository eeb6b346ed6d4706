"""``linalg_matrix_exp`` (``matrix_exp``): scaling and squaring with the degree-18 Taylor
polynomial, the method and degree torch uses for large norms (Bader, Blanes and Casas,
"Computing the matrix exponential with an optimized Taylor polynomial approximation",
Mathematics 7(12), 2019).

``A`` is scaled by ``2⁻ˢ`` with ``s = max(0, ⌈log₂(‖A‖₁ / θ)⌉)``, per matrix of the batch, where
θ is the norm up to which the degree-18 truncation error is below the dtype's rounding
(θ = 3.010066362817634 for f32, 1.090863719290036 for f64: the paper's bounds, which torch
uses too); the polynomial is evaluated by Horner's rule (18 matrix products, no solve, so no
pivoting error to amplify) and the result is squared ``s`` times. The kernel cannot loop a
data-dependent number of times, so it squares ``MAX_SQUARINGS`` = 32 times, keeping the
product only for the first ``s``: norms up to θ·2³² (≈ 5·10⁹ in f64) are handled exactly as the
algorithm says; beyond that the scaled matrix stays above θ and accuracy degrades (such
exponentials overflow unless the matrix is close to skew-symmetric). torch evaluates lower
degrees for small norms; both are accurate to rounding. Real floats, sizes up to
``MAX_ORDER`` = 64.
"""

from __future__ import annotations

import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .conventions import require
from .matrix_steps import eye, require_order, require_real
from .rules import RULES

aten = torch.ops.aten

DEGREE = 18
THETA = {DType.f32: 3.010066362817634, DType.f64: 1.090863719290036}
MAX_SQUARINGS = 32


@RULES.register(aten.linalg_matrix_exp.default)
def linalg_matrix_exp(ctx, a):
    n = a.shape[-1]
    dtype = knp.dtype_of(a)
    require_real(a, "matrix exponential")
    require(dtype in THETA, f"matrix exponential in {dtype.value} (f32 and f64 only)")
    require_order(n, "matrix exponential")
    if n == 0:
        return a
    norm = knp.max(knp.sum(knp.abs(a), -2), -1)
    s = knp.minimum(
        knp.maximum(knp.ceil(knp.log2(knp.divide(norm, THETA[dtype]))), 0), MAX_SQUARINGS
    )
    s = knp.expand_dims(knp.expand_dims(s, -1), -1)
    a = knp.divide(a, knp.exp2(s))
    identity = eye(n, dtype)
    x = identity
    for k in range(DEGREE, 0, -1):
        x = knp.add(identity, knp.divide(knp.matmul(a, x), k))
    for i in range(MAX_SQUARINGS):
        x = knp.where(knp.greater(s, i), knp.matmul(x, x), x)
    return x
