"""Tensors made from nothing or copied: factories, fills, ``arange``, casts and copies.

Factories take their shape and dtype from the node (``ctx.out``), which already holds what
torch resolved from ``dtype=None``, default dtypes and scalar types. Device, layout, pinning
and memory format do not change values, so they are accepted and ignored; ``empty`` tensors
have unspecified contents and are lowered as zeros. Complex results are pairs of reals
(``complex_pairs``): fills, casts and copies make them as torch's conversions do.
"""

from __future__ import annotations

import numpy as np
import torch

from nkipy_core import knp

from . import complex_pairs
from .opmath import compute_dtype
from .rules import RULES

aten = torch.ops.aten
prims = torch.ops.prims


def _filled(ctx, value):
    """The result filled with a Python number (complex ones too)."""
    if ctx.complex_out:
        return knp.broadcast_to(complex_pairs.pair(value, False, ctx.out_dtype), ctx.out.shape)
    return knp.full(ctx.out.shape, value, ctx.out_dtype)


@RULES.register(aten.full.default, complex=True)
def full(ctx, size, fill_value, **_):
    return _filled(ctx, fill_value)


@RULES.register(aten.full_like.default, aten.fill.Scalar, complex=True)
def full_like(ctx, x, fill_value, **_):
    return _filled(ctx, fill_value)


@RULES.register(aten.zero.default, complex=True)
def zero(ctx, x):
    return knp.zeros(ctx.out.shape, ctx.out_dtype)


@RULES.register(aten.fill.Tensor, complex=True)
def fill_tensor(ctx, x, value):
    return knp.broadcast_to(_converted(ctx, value, 1), ctx.out.shape)


@RULES.register(aten.scalar_tensor.default, complex=True)
def scalar_tensor(ctx, s, **_):
    if ctx.complex:
        return complex_pairs.pair(s, False, ctx.out_dtype)
    return knp.full((), s, ctx.out_dtype)


@RULES.register(
    aten.empty.memory_format,
    aten.empty_strided.default,
    aten.empty_permuted.default,
    aten.new_empty_strided.default,
    aten._efficientzerotensor.default,
    complex=True,
)
def empty(ctx, *_, **__):
    """Uninitialized memory as zeros; ``_efficientzerotensor`` is autograd's zero gradient (the
    backward of ``sgn``), which must be zeros. Strides are the kernel's (contiguous)."""
    return knp.zeros(ctx.out.shape, ctx.out_dtype)


def _arange(ctx, start, step):
    """``start + i * step`` for ``i`` in the output's length, integers exactly, floats in opmath."""
    dtype = ctx.out_dtype
    compute = compute_dtype(dtype) if dtype.is_float else knp.result_type(start, step, 1)
    i = knp.arange(ctx.out.shape[0], compute)
    return knp.astype(
        knp.add(knp.multiply(i, knp.asarray(step, compute)), knp.asarray(start, compute)), dtype
    )


@RULES.register(aten.arange.start_step)
def arange(ctx, start, end, step=1, **_):
    return _arange(ctx, start, step)


@RULES.register(prims.iota.default)
def iota(ctx, length, *, start, step, **_):
    return _arange(ctx, start, step)


@RULES.register(aten.triu_indices.default)
def triu_indices(ctx, row, col, offset=0, **_):
    """Coordinates of the upper triangle, row-major: a constant."""
    return np.stack(np.triu_indices(row, offset, col)).astype(ctx.out_dtype.numpy)


@RULES.register(aten.tril_indices.default)
def tril_indices(ctx, row, col, offset=0, **_):
    return np.stack(np.tril_indices(row, offset, col)).astype(ctx.out_dtype.numpy)


def _converted(ctx, value, position: int):
    """Positional argument ``position`` converted to the result's dtype as torch converts: a real
    one to complex with a zero imaginary part, a complex one to real by dropping it (torch
    warns there, eagerly)."""
    if ctx.complex_out:
        return complex_pairs.operand(ctx, value, position)
    if complex_pairs.arg_is_complex(ctx, position):
        value = value[..., complex_pairs.REAL]
    return knp.astype(value, ctx.out_dtype)


@RULES.register(aten._to_copy.default, prims.convert_element_type.default, complex=True)
def to_copy(ctx, x, *_, **__):
    return _converted(ctx, x, 0)


@RULES.register(aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default, complex=True)
def clone(ctx, x, **_):
    return x


@RULES.register(aten.copy.default, complex=True)
def copy(ctx, x, src, non_blocking=False):
    return knp.broadcast_to(_converted(ctx, src, 1), ctx.out.shape)
