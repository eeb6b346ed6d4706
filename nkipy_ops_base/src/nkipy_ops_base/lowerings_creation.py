"""Tensors made from nothing or copied: factories, fills, ``arange``, casts and copies.

Factories take their shape and dtype from the node (``ctx.out``), which already holds what
torch resolved from ``dtype=None``, default dtypes and scalar types. Device, layout, pinning
and memory format do not change values, so they are accepted and ignored; ``empty`` tensors
have unspecified contents and are lowered as zeros.
"""

from __future__ import annotations

import numpy as np
import torch

from nkipy_core import knp

from .opmath import compute_dtype
from .rules import RULES

aten = torch.ops.aten
prims = torch.ops.prims


@RULES.register(aten.full.default)
def full(ctx, size, fill_value, **_):
    return knp.full(ctx.out.shape, fill_value, ctx.out_dtype)


@RULES.register(aten.full_like.default, aten.fill.Scalar)
def full_like(ctx, x, fill_value, **_):
    return knp.full(ctx.out.shape, fill_value, ctx.out_dtype)


@RULES.register(aten.zero.default)
def zero(ctx, x):
    return knp.zeros(ctx.out.shape, ctx.out_dtype)


@RULES.register(aten.fill.Tensor)
def fill_tensor(ctx, x, value):
    return knp.broadcast_to(knp.astype(value, ctx.out_dtype), ctx.out.shape)


@RULES.register(aten.scalar_tensor.default)
def scalar_tensor(ctx, s, **_):
    return knp.full((), s, ctx.out_dtype)


@RULES.register(aten.empty.memory_format, aten.empty_strided.default, aten.empty_permuted.default)
def empty(ctx, size, *_, **__):
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


@RULES.register(aten._to_copy.default, prims.convert_element_type.default)
def to_copy(ctx, x, *_, **__):
    return knp.astype(x, ctx.out_dtype)


@RULES.register(aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default)
def clone(ctx, x, **_):
    return x


@RULES.register(aten.copy.default)
def copy(ctx, x, src, non_blocking=False):
    return knp.broadcast_to(knp.astype(src, ctx.out_dtype), ctx.out.shape)
