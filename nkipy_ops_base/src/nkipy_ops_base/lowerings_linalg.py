"""Matrix products (``mm``, ``bmm``, ``addmm``, ``addmv``, ``addbmm``, ``dot``, ``mv``,
``_grouped_mm``, ``_trilinear``) and distances (``dist``, ``cdist``, ``pdist``, forward and
backward).

Products are ``knp.matmul`` in torch's opmath: half floats multiply and accumulate in f32 and
round once, which is what torch's CPU GEMMs do. (``addbmm`` and ``_trilinear`` are one product
here where torch's CPU kernels chain several and round half floats between them: the results
differ by those roundings, towards the exact value.) ``addmm`` and ``addmv`` ignore ``self`` when
``beta == 0`` (so NaNs in it do not propagate), as ATen documents. Distances are p-norms of
explicit differences (torch may use a matrix-product form for large Euclidean ones; the direct
form is at least as accurate).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from nkipy_core import knp

from . import complex_pairs
from .conventions import inverse_permutation, require
from .lowerings_reduction import p_norm
from .opmath import opmath
from .rules import RULES

aten = torch.ops.aten


def _complex_matmul(a, b):
    """The product of complex matrices (pairs) as four real products:
    ``(ArBr - AiBi) + i(ArBi + AiBr)``."""
    ar, ai, br, bi = (p[..., part] for p in (a, b) for part in (0, 1))
    return complex_pairs.join(
        knp.subtract(knp.matmul(ar, br), knp.matmul(ai, bi)),
        knp.add(knp.matmul(ar, bi), knp.matmul(ai, br)),
    )


@RULES.register(aten.mm.default, aten.bmm.default, aten.dot.default, aten.mv.default, complex=True)
def matmul(ctx, x, other):
    if ctx.complex:
        return _complex_matmul(
            complex_pairs.operand(ctx, x, 0), complex_pairs.operand(ctx, other, 1)
        )
    return opmath(ctx.out_dtype, knp.matmul, x, other)


@RULES.register(aten.addmm.default, aten.addmv.default, complex=True)
def addmm(ctx, bias, mat, other, *, beta=1, alpha=1):
    """``beta · bias + alpha · (mat @ other)`` for a matrix or vector ``other``; complex
    operands (and ``alpha``, ``beta``) by ``complex_pairs``."""
    if ctx.complex:
        product = _complex_matmul(
            complex_pairs.operand(ctx, mat, 1), complex_pairs.operand(ctx, other, 2)
        )
        if alpha != 1:
            product = complex_pairs.multiply(
                product, complex_pairs.pair(alpha, False, ctx.out_dtype)
            )
        if beta == 0:
            return knp.broadcast_to(product, ctx.out.shape)
        bias = complex_pairs.operand(ctx, bias, 0)
        if beta != 1:
            bias = complex_pairs.multiply(bias, complex_pairs.pair(beta, False, ctx.out_dtype))
        return knp.add(bias, product)

    def fn(c, a, b):
        product = knp.matmul(a, b)
        product = product if alpha == 1 else knp.multiply(product, alpha)
        if beta == 0:
            return knp.broadcast_to(product, ctx.out.shape)
        return knp.add(c if beta == 1 else knp.multiply(c, beta), product)

    return opmath(ctx.out_dtype, fn, bias, mat, other)


@RULES.register(aten.addbmm.default)
def addbmm(ctx, bias, batch1, batch2, *, beta=1, alpha=1):
    """``beta · bias + alpha · Σ_b batch1[b] @ batch2[b]``: the batch sum is folded into the
    contraction, ``[N, B·K] @ [B·K, M]``."""
    count, rows, inner = batch1.shape
    left = knp.reshape(knp.transpose(batch1, (1, 0, 2)), (rows, count * inner))
    right = knp.reshape(batch2, (count * inner, batch2.shape[-1]))
    return addmm(ctx, bias, left, right, beta=beta, alpha=alpha)


def _sum_product(a, b, summed: set[int]):
    """``Σ_summed a · b`` for operands of one rank whose dims are equal or 1 (broadcast), keeping
    the summed dims (as 1): one ``matmul`` with the dims both carry (sizes other than 1) as its
    batch."""
    rank = a.ndim
    summed_a = tuple(d for d in summed if b.shape[d] == 1 and a.shape[d] != 1)
    summed_b = tuple(d for d in summed if a.shape[d] == 1 and b.shape[d] != 1)
    a = knp.sum(a, summed_a, keepdims=True) if summed_a else a
    b = knp.sum(b, summed_b, keepdims=True) if summed_b else b
    kept = [d for d in range(rank) if d not in summed]
    contracted = [d for d in sorted(summed) if a.shape[d] != 1]
    batch = [d for d in kept if a.shape[d] != 1 and b.shape[d] != 1]
    only_a = [d for d in kept if a.shape[d] != 1 and b.shape[d] == 1]
    only_b = [d for d in kept if a.shape[d] == 1 and b.shape[d] != 1]
    rest = [d for d in range(rank) if d not in {*contracted, *batch, *only_a, *only_b}]

    def size(x, dims):
        return math.prod(x.shape[d] for d in dims)

    left = knp.reshape(
        knp.transpose(a, [*batch, *only_a, *contracted, *only_b, *rest]),
        (size(a, batch), size(a, only_a), size(a, contracted)),
    )
    right = knp.reshape(
        knp.transpose(b, [*batch, *contracted, *only_b, *only_a, *rest]),
        (size(b, batch), size(b, contracted), size(b, only_b)),
    )
    order = [*batch, *only_a, *only_b]
    shape = [a.shape[d] if d in only_a or d in batch else b.shape[d] for d in order]
    ones = [d for d in range(rank) if d not in order]  # summed or 1 in both
    product = knp.reshape(knp.matmul(left, right), shape + [1] * len(ones))
    return knp.transpose(product, inverse_permutation([*order, *ones]))


@RULES.register(aten._trilinear.default)
def trilinear(ctx, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """``Σ_sumdim i1 · i2 · i3``, each operand first given size-1 dims at its ``expand`` list
    (``nn.functional.bilinear`` and its gradients): ``i1 · i2`` is contracted over the summed
    dims ``i3`` does not carry, then the result with ``i3`` over the rest."""
    summed = set(sumdim)

    def fn(a, b, c):
        a, b, c = (
            knp.reshape(x, _expanded(x.shape, dims))
            for x, dims in ((a, expand1), (b, expand2), (c, expand3))
        )
        first = _sum_product(a, b, {d for d in summed if c.shape[d] == 1})
        both = _sum_product(first, c, {d for d in summed if c.shape[d] != 1})
        return knp.reshape(both, ctx.out.shape)

    return opmath(ctx.out_dtype, fn, i1, i2, i3)


def _expanded(shape, dims) -> list[int]:
    """``shape`` with a 1 inserted at each of ``dims`` (positions in the result)."""
    rank = len(shape) + len(dims)
    sizes = iter(shape)
    return [1 if d in dims else next(sizes) for d in range(rank)]


def _group_masks(offs, size: int):
    """``[G, size]`` booleans: position ``i`` is in group ``g`` when
    ``offs[g - 1] <= i < offs[g]`` (``offs`` holds each group's end; the first starts at 0).
    Computed in the kernel from the offsets it is given, in int32 as they come."""
    ends = knp.expand_dims(offs, -1)
    starts = knp.concatenate([knp.zeros((1, 1), knp.dtype_of(offs)), ends[:-1]])
    positions = knp.expand_dims(knp.arange(size, knp.dtype_of(offs)), 0)
    return knp.logical_and(knp.greater_equal(positions, starts), knp.less(positions, ends))


def _select_groups(products, masks):
    """Per position, the product of its group (``products[g]`` where ``masks[g]``, zeros where no
    group covers it): one select per group, so the other groups' values, NaN or infinite, never
    reach it."""
    out = knp.zeros(products.shape[1:], knp.dtype_of(products))
    for g in range(products.shape[0]):
        out = knp.where(masks[g], products[g], out)
    return out


@RULES.register(aten._grouped_mm.default)
def grouped_mm(ctx, a, b, offs=None, bias=None, out_dtype=None):
    """Products of groups (MoE experts): ``offs`` (int32) holds each group's end along the
    dimension it splits, and is data: the kernel is right for any offsets of its shapes.

    * ``a`` 2-D ``[T, K]``, ``b`` 3-D ``[G, K, N]``: rows of ``a`` in group ``g`` times ``b[g]``;
      all ``G`` products ``[G, T, N]`` are formed and each row takes its group's.
    * ``a`` 3-D ``[G, M, K]``, ``b`` 2-D ``[K, N]``: the same over the columns of ``b``.
    * both 2-D, ``[M, T]`` and ``[T, N]``: groups split the contraction (a MoE weight gradient);
      product ``g`` contracts both operands with the other groups' positions zeroed.
    * both 3-D: a batched product (no offsets).

    Cost: ``G`` times the multiply-adds of one dense product, and a ``G``-fold intermediate
    (the products, or for 2-D operands the masked copies of both). Positions no group covers
    (past the last offset) are zeros; torch leaves them unwritten. Half floats accumulate in f32
    and round once, as torch's CPU kernel does.
    """
    require(bias is None, "_grouped_mm with a bias (torch has none either)")
    if offs is None:
        return opmath(ctx.out_dtype, knp.matmul, a, b)

    def fn(a, b):
        if a.ndim == 2 and b.ndim == 3:
            rows = knp.expand_dims(_group_masks(offs, a.shape[0]), -1)
            return _select_groups(knp.matmul(knp.expand_dims(a, 0), b), rows)
        if a.ndim == 3 and b.ndim == 2:
            columns = knp.expand_dims(_group_masks(offs, b.shape[1]), 1)
            return _select_groups(knp.matmul(a, knp.expand_dims(b, 0)), columns)
        masks = _group_masks(offs, a.shape[1])
        zero = knp.zeros((), knp.dtype_of(a))
        left = knp.where(knp.expand_dims(masks, 1), knp.expand_dims(a, 0), zero)
        right = knp.where(knp.expand_dims(masks, -1), knp.expand_dims(b, 0), zero)
        return knp.matmul(left, right)

    return opmath(ctx.out_dtype, fn, a, b)


def _norm_grad(diff, dist, p):
    """``d ||diff||_p / d diff`` (zero where the distance is zero), as ATen's distance backward."""
    safe = knp.where(knp.equal(dist, 0), 1, dist)
    if p == 0:
        return knp.zeros(diff.shape, knp.dtype_of(diff))
    if p == 1:
        grad = knp.sign(diff)
    elif p == 2:
        grad = knp.divide(diff, safe)
    elif p == math.inf:
        grad = knp.multiply(knp.sign(diff), knp.equal(knp.abs(diff), dist))
    else:
        ratio = knp.power(knp.divide(knp.abs(diff), safe), p - 1)
        grad = knp.where(knp.equal(diff, 0), 0, knp.multiply(knp.sign(diff), ratio))
    return knp.where(knp.equal(dist, 0), 0, grad)


def _pairs(x1, x2):
    """``x1[..., i, :] - x2[..., j, :]`` for all ``i, j``: ``(..., P, R, M)``."""
    return knp.subtract(knp.expand_dims(x1, -2), knp.expand_dims(x2, -3))


@RULES.register(aten.dist.default)
def dist(ctx, x, other, p=2):
    """``‖x − other‖_p`` over all elements; the difference is rounded to the dtype first, as
    torch's ``norm(x - other)`` does."""
    diff = opmath(ctx.out_dtype, knp.subtract, x, other)
    return opmath(ctx.out_dtype, lambda v: p_norm(v, p, tuple(range(v.ndim))), diff)


@RULES.register(aten._cdist_forward.default)
def cdist(ctx, x1, x2, p, compute_mode=None):
    return opmath(ctx.out_dtype, lambda a, b: p_norm(_pairs(a, b), p, (-1,)), x1, x2)


@RULES.register(aten._cdist_backward.default)
def cdist_backward(ctx, grad, x1, x2, p, dist):
    """The gradient for ``x1`` (autograd calls it again with the operands swapped for ``x2``)."""

    def fn(g, a, b, d):
        weights = knp.multiply(
            knp.expand_dims(g, -1), _norm_grad(_pairs(a, b), knp.expand_dims(d, -1), p)
        )
        return knp.sum(weights, -2)

    return opmath(ctx.out_dtype, fn, grad, x1, x2, dist)


@RULES.register(aten._pdist_forward.default)
def pdist(ctx, x, p=2.0):
    """Distances between rows ``i < j``, in row-major pair order."""
    first, second = np.triu_indices(x.shape[0], 1)
    return opmath(
        ctx.out_dtype,
        lambda v: p_norm(knp.subtract(knp.take(v, first), knp.take(v, second)), p, (-1,)),
        x,
    )


@RULES.register(aten._pdist_backward.default)
def pdist_backward(ctx, grad, x, p, dist):
    first, second = np.triu_indices(x.shape[0], 1)

    def fn(g, v, d):
        diff = knp.subtract(knp.take(v, first), knp.take(v, second))
        pair = knp.multiply(knp.expand_dims(g, -1), _norm_grad(diff, knp.expand_dims(d, -1), p))
        zeros = knp.zeros(v.shape, knp.dtype_of(v))
        return knp.subtract(
            knp.scatter_add(zeros, first, pair), knp.scatter_add(zeros, second, pair)
        )

    return opmath(ctx.out_dtype, fn, grad, x, dist)
