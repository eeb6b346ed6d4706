"""Integer arithmetic with no primitive of its own: bit shifts, ``gcd`` and ``lcm``.

The IR has no shift: ``x << s`` multiplies by ``2**s`` (wrapping, as integer multiplication
does) and a signed ``x >> s`` floor-divides by it, which rounds toward minus infinity exactly as
an arithmetic shift does. ``2**s`` would overflow for ``s = width - 1``, so the shift is applied
one bit of ``s`` at a time: for each set bit ``k``, a multiply or floor-divide by ``2**(2**k)``,
which fits the dtype for every bit a valid count can have. Counts follow torch: a negative count
or one of at least the bit width gives 0 for ``<<`` and for an unsigned ``>>``, and the sign
fill (0 or -1) for a signed ``>>``.

``gcd`` is Euclid's algorithm unrolled a fixed number of times, each step masked once the
remainder reaches zero; see ``_euclid_steps`` for why that count always suffices.
"""

from __future__ import annotations

import numpy as np
import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .conventions import require
from .rules import RULES

aten = torch.ops.aten


def _integers(ctx, *values):
    require(
        ctx.out_dtype.is_integer and ctx.out_dtype is not DType.bool,
        f"{ctx.out_dtype.value} operands (torch only defines this op for integers)",
    )
    return [knp.astype(v, ctx.out_dtype) for v in values]


def _bits(dtype: DType) -> int:
    return np.iinfo(dtype.numpy).bits


def _by_powers_of_two(x, count, combine):
    """``combine(x, 2**(2**k))`` for each set bit ``k`` of ``count`` (``0 <= count < width``)."""
    dtype = knp.dtype_of(x)
    for k in range((_bits(dtype) - 1).bit_length()):
        factor = dtype.scalar(1 << (1 << k))
        has_bit = knp.not_equal(knp.bitwise_and(count, dtype.scalar(1 << k)), 0)
        x = knp.where(has_bit, combine(x, factor), x)
    return x


def _shift(ctx, x, count, combine):
    """Whether each count is valid (``0 <= count < width``), and ``x`` shifted by ``combine``
    by the count where valid, by ``width - 1`` elsewhere (a signed right shift's sign fill)."""
    x, count = _integers(ctx, x, count)
    width = _bits(ctx.out_dtype)
    valid = knp.logical_and(knp.greater_equal(count, 0), knp.less(count, width))
    applied = knp.where(valid, count, width - 1)
    return valid, _by_powers_of_two(knp.broadcast_to(x, ctx.out.shape), applied, combine)


@RULES.register(
    aten.bitwise_left_shift.Tensor,
    aten.bitwise_left_shift.Tensor_Scalar,
    aten.bitwise_left_shift.Scalar_Tensor,
    aten.__lshift__.Tensor,
    aten.__lshift__.Scalar,
)
def bitwise_left_shift(ctx, x, count):
    valid, shifted = _shift(ctx, x, count, knp.multiply)
    return knp.where(valid, shifted, 0)


@RULES.register(
    aten.bitwise_right_shift.Tensor,
    aten.bitwise_right_shift.Tensor_Scalar,
    aten.bitwise_right_shift.Scalar_Tensor,
    aten.__rshift__.Tensor,
    aten.__rshift__.Scalar,
)
def bitwise_right_shift(ctx, x, count):
    valid, shifted = _shift(ctx, x, count, knp.floor_divide)
    return shifted if ctx.out_dtype.numpy.kind == "i" else knp.where(valid, shifted, 0)


def _euclid_steps(dtype: DType) -> int:
    """How many Euclid steps ``(a, b) -> (b mod a, a)`` bring any pair of magnitudes of
    ``dtype`` to ``a = 0``.

    Lamé: the smallest ``b > a`` that need ``n`` steps are the Fibonacci numbers
    ``(F(n+2), F(n+1))``, so magnitudes up to ``M`` need at most ``n`` steps for the largest
    ``n`` with ``F(n+2) <= M``, plus one step that swaps a pair given with ``a > b``. That is the
    number of Fibonacci numbers ``1, 2, 3, 5, ...`` up to ``M``: 91 for int64, 45 for int32."""
    largest = int(np.iinfo(dtype.numpy).max) + 1  # |min| of a signed dtype
    steps, previous, current = 0, 1, 1
    while current <= largest:
        steps += 1
        previous, current = current, previous + current
    return steps


def _gcd(a, b):
    """Euclid on ``|a|, |b|`` with C's remainder (``fmod``), as torch's kernel computes."""
    a, b = knp.abs(a), knp.abs(b)
    for _ in range(_euclid_steps(knp.dtype_of(a))):
        running = knp.not_equal(a, 0)
        rest = knp.fmod(b, knp.where(running, a, 1))
        a, b = knp.where(running, rest, 0), knp.where(running, a, b)
    return b


@RULES.register(aten.gcd.default)
def gcd(ctx, a, b):
    a, b = _integers(ctx, a, b)
    return _gcd(*(knp.broadcast_to(v, ctx.out.shape) for v in (a, b)))


@RULES.register(aten.lcm.default)
def lcm(ctx, a, b):
    """``|a / gcd * b|``, and 0 where the gcd is 0 (both operands 0). Past the dtype's range the
    product wraps as torch's does: computed in int32 for narrower types (C's integer promotion),
    so the absolute value is taken before the wrap."""
    a, b = (knp.broadcast_to(v, ctx.out.shape) for v in _integers(ctx, a, b))
    g = _gcd(a, b)
    zero = knp.equal(g, 0)
    wide = DType.i32 if _bits(ctx.out_dtype) < 32 else ctx.out_dtype
    quotient = knp.astype(knp.floor_divide(a, knp.where(zero, 1, g)), wide)
    product = knp.abs(knp.multiply(quotient, knp.astype(b, wide)))
    return knp.astype(knp.where(zero, 0, product), ctx.out_dtype)
