"""Complex numbers as pairs of reals: what the rules registered with ``complex=True`` compute with.

The IR has no complex types (Trainium has none): a complex tensor reaches a rule as its real view,
``[..., 2]`` real and imaginary parts, and a complex result is returned the same way (see
``nkipy_core.compiler.lowering``). These helpers turn operands into such pairs as torch's type
promotion makes them complex (a real tensor or number gets a zero imaginary part) and do torch's
complex arithmetic on them: a product is ``(ac - bd, ad + bc)`` with each product rounded, as
ATen's vectorised CPU kernels compute it, so no NaN or infinity is lost or made where torch's
would not be.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nkipy_core import knp
from nkipy_core.ir import DType

#: a pair's parts: the real and the imaginary
REAL, IMAG = 0, 1


def arg_is_complex(ctx, position: int = 0) -> bool:
    """Whether positional argument ``position`` of the node is a complex tensor."""
    return ctx.complex and position < len(ctx.complex_args) and bool(ctx.complex_args[position])


def dim(ctx, x, d: int, new: int = 0) -> int:
    """Torch's dim ``d`` of positional argument 0 (``x``) as an axis of its traced array. For a
    complex ``x`` a negative dim counts from torch's last dim, not from the pair dimension, so
    it is made non-negative (``new``: the dims the op adds, 1 for ``unsqueeze``); a real
    ``x``'s dims are unchanged."""
    return d % (x.ndim - 1 + new) if arg_is_complex(ctx) else d


def pair(value: Any, is_complex: bool, dtype: DType):
    """An operand as pairs of ``dtype`` parts: a complex tensor's real view as it is (cast), a
    real tensor or number with a zero imaginary part, a Python complex number as its parts."""
    if isinstance(value, complex):
        return np.array([value.real, value.imag], dtype.numpy)
    if isinstance(value, (bool, int, float)):
        return np.array([value, 0], dtype.numpy)
    if is_complex:
        return knp.astype(value, dtype)
    real = knp.astype(value, dtype)
    return knp.stack([real, knp.zeros(real.shape, dtype)], axis=-1)


def operand(ctx, value: Any, position: int):
    """Positional argument ``position`` of a complex node (``value``) as pairs of the result's
    part dtype (``ctx.out_dtype``: a complex result's type is its real view's)."""
    return pair(value, arg_is_complex(ctx, position), ctx.out_dtype)


def join(real, imag):
    """Pairs from their real and imaginary parts (arrays of one shape and dtype)."""
    return knp.stack([real, imag], axis=-1)


def multiply(a, b):
    """The complex product of two pairs (broadcasting): ``(ac - bd, ad + bc)``."""
    ar, ai, br, bi = a[..., REAL], a[..., IMAG], b[..., REAL], b[..., IMAG]
    return join(
        knp.subtract(knp.multiply(ar, br), knp.multiply(ai, bi)),
        knp.add(knp.multiply(ar, bi), knp.multiply(ai, br)),
    )


def divide(a, b):
    """The complex quotient of two pairs (broadcasting) by Smith's algorithm (R. L. Smith,
    "Algorithm 116: Complex division", CACM 5(8), 1962), as c10's ``complex`` divides: the
    divisor's larger part is the pivot, so ``|b|²`` is never formed and cannot overflow. A zero
    divisor divides each part by a zero, giving the infinities and NaNs real division gives."""
    ar, ai, br, bi = a[..., REAL], a[..., IMAG], b[..., REAL], b[..., IMAG]
    flip = knp.less(knp.abs(br), knp.abs(bi))
    big, small = knp.where(flip, bi, br), knp.where(flip, br, bi)
    ratio = knp.divide(small, big)
    denominator = knp.add(big, knp.multiply(small, ratio))
    # unflipped: ((ar + ai·r), (ai - ar·r)) / d; flipped: ((ar·r + ai), (ai·r - ar)) / d
    real = knp.where(
        flip, knp.add(knp.multiply(ar, ratio), ai), knp.add(ar, knp.multiply(ai, ratio))
    )
    imag = knp.where(
        flip, knp.subtract(knp.multiply(ai, ratio), ar), knp.subtract(ai, knp.multiply(ar, ratio))
    )
    zero = knp.logical_and(knp.equal(br, 0), knp.equal(bi, 0))
    return join(
        knp.where(zero, knp.divide(ar, knp.abs(br)), knp.divide(real, denominator)),
        knp.where(zero, knp.divide(ai, knp.abs(bi)), knp.divide(imag, denominator)),
    )


def reciprocal(x):
    """``1 / x`` as torch's complex ``reciprocal`` computes it: a complex division."""
    return divide(np.array([1, 0], knp.dtype_of(x).numpy), x)


def exp(x):
    """``e^a (cos b, sin b)`` for ``x = a + ib``; a zero imaginary part stays exact (so
    ``exp(inf + 0j)`` is ``inf + 0j``, not ``inf·sin 0`` = NaN)."""
    a, b = x[..., REAL], x[..., IMAG]
    scale = knp.exp(a)
    real = knp.where(knp.equal(b, 0), scale, knp.multiply(scale, knp.cos(b)))
    return join(real, knp.where(knp.equal(b, 0), b, knp.multiply(scale, knp.sin(b))))


def sigmoid(x):
    """``1 / (1 + exp(-x))``, the steps of ATen's complex ``sigmoid``: it has no overflow
    guard, so a large negative real part gives ``exp(-x)`` infinite and a zero result."""
    one = np.array([1, 0], knp.dtype_of(x).numpy)
    return reciprocal(knp.add(one, exp(knp.negative(x))))


def log(x):
    """The principal logarithm ``(log |x|, arg x)``."""
    return join(knp.log(magnitude(x)), knp.arctan2(x[..., IMAG], x[..., REAL]))


def power(base, exponent, scalar=None):
    """``base ** exponent`` of pairs. A Python exponent of 2, 3 or -1 is products or a
    reciprocal, as ATen's ``pow`` special-cases them; others are ``exp(exponent · log base)``,
    with a zero base giving zero for an exponent of positive real part (``log 0`` is ``-inf``)."""
    if scalar in (2, 3):
        square = multiply(base, base)
        return square if scalar == 2 else multiply(square, base)
    if scalar == -1:
        return reciprocal(base)
    result = exp(multiply(exponent, log(base)))
    zero = knp.logical_and(knp.equal(base[..., REAL], 0), knp.equal(base[..., IMAG], 0))
    vanishes = knp.logical_and(zero, knp.greater(exponent[..., REAL], 0))
    return knp.where(knp.expand_dims(vanishes, -1), 0, result)


def conjugate(x):
    """The imaginary parts negated (``-0.0`` for ``0.0``, as torch's ``conj_physical``)."""
    return knp.multiply(x, np.array([1, -1], knp.dtype_of(x).numpy))


def hypot(a, b):
    """``sqrt(a² + b²)`` as C's ``hypot``: ``big · sqrt(1 + (small/big)²)``, which neither
    overflows nor underflows early; infinite if either operand is, even with a NaN."""
    a, b = knp.abs(a), knp.abs(b)
    big, small = knp.maximum(a, b), knp.minimum(a, b)
    ratio = knp.divide(small, knp.where(knp.equal(big, 0), 1, big))
    result = knp.multiply(big, knp.sqrt(knp.add(1, knp.multiply(ratio, ratio))))
    return knp.where(knp.logical_or(knp.isinf(a), knp.isinf(b)), math.inf, result)


def magnitude(x):
    """``|x|`` of pairs, as ATen's complex ``abs`` (``hypot`` of the parts)."""
    return hypot(x[..., REAL], x[..., IMAG])
