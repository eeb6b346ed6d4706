"""``embedding_bag``: sums, means or maxima of embedding rows over bags given by offsets.

ATen's ``_embedding_bag`` (and its inference twin ``_embedding_bag_forward_only``) returns,
besides the result, the tensors its backward reads, and they must hold what torch's CPU kernel
puts there, because the backward may run on CPU: ``offset2bag`` (the bag of each index; empty
when the kernel takes its fast ``sum`` path, as the node's type says), ``bag_size`` (the
non-padding indices per bag for ``mean``/``max``, zeros for ``sum``) and ``max_indices`` (the
weight row each ``max`` came from; for ``sum``/``mean`` a copy of ``bag_size``).

Rows are gathered with ``take`` and reduced into their bags with ``scatter_add`` (``sum``,
``mean``; half floats accumulate in f32) or the ``scatter_reduce`` primitive (``max``, exact
in any dtype). Empty bags give zeros. ``max`` takes the first index of a tied maximum, as torch;
a NaN in a bag makes its maximum NaN, where torch's ``>`` keeps a NaN only in first place.
The backward ops (``_embedding_bag_backward``, ``_embedding_bag_dense_backward``,
``_embedding_bag_per_sample_weights_backward``) scatter the bags' gradients back with
``scatter_add``; a sparse gradient is declined.
"""

from __future__ import annotations

import math

import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .conventions import require
from .opmath import compute_dtype
from .rules import RULES

aten = torch.ops.aten

_SUM, _MEAN, _MAX = 0, 1, 2


def _column(x):
    return knp.expand_dims(x, -1)


def _bag_of_each_index(offsets, n: int):
    """``offset2bag``: how many offsets are ``<= i``, minus one (offsets start at 0, ascend)."""
    starts = knp.scatter_add(
        knp.zeros((n + 1,), DType.i64),
        knp.astype(offsets, DType.i64),
        knp.ones(offsets.shape, DType.i64),
    )
    return knp.subtract(knp.cumsum(starts, 0)[:n], 1)


def _bag_max(rows, bag, kept, indices, bags: int):
    """Per bag and column, the largest kept row value and the weight row it came from (the
    first such index), or 0 and 0 for a bag without kept rows."""
    n, dtype = rows.shape[0], knp.dtype_of(rows)
    candidates = rows if kept is None else knp.where(_column(kept), rows, -math.inf)
    best = knp.scatter_reduce(
        knp.full((bags, rows.shape[1]), -math.inf, dtype), bag, candidates, "max"
    )
    hit = knp.equal(rows, knp.take(best, bag, axis=0))
    if kept is not None:
        hit = knp.logical_and(hit, _column(kept))
    position = knp.where(hit, _column(knp.arange(n)), n)
    first = knp.scatter_reduce(knp.full((bags, rows.shape[1]), n, DType.i64), bag, position, "min")
    found = knp.less(first, n)
    source = knp.take(indices, knp.minimum(first, n - 1))
    return knp.where(found, best, 0), knp.where(found, source, 0)


def _fit(x, shape, dtype):
    """``x`` (1-D) cut or zero-padded to ``shape`` and converted to ``dtype``."""
    x = knp.astype(x, dtype)
    if x.shape[0] >= shape[0]:
        return x[: shape[0]]
    return knp.pad(x, [(0, shape[0] - x.shape[0])])


@RULES.register(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def embedding_bag(
    ctx,
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=_SUM,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=-1,
):
    out, offset2bag_type, bag_size_type, max_indices_type = ctx.out
    bags, n = out.shape[0], indices.shape[0]
    index_dtype = bag_size_type.dtype
    indices = knp.astype(indices, DType.i64)
    bag = knp.minimum(knp.maximum(_bag_of_each_index(offsets, n), 0), max(bags - 1, 0))
    kept = knp.not_equal(indices, padding_idx) if padding_idx >= 0 else None
    count = knp.ones((n,), DType.i64) if kept is None else knp.astype(kept, DType.i64)
    sizes = knp.scatter_add(knp.zeros((bags,), DType.i64), bag, count)
    rows = knp.take(weight, indices, axis=0)
    if mode == _MAX:
        result, max_indices = _bag_max(rows, bag, kept, indices, bags)
        max_indices = knp.astype(max_indices, max_indices_type.dtype)
    else:
        compute = compute_dtype(out.dtype)
        rows = knp.astype(rows, compute)
        if per_sample_weights is not None:
            rows = knp.multiply(rows, _column(knp.astype(per_sample_weights, compute)))
        if kept is not None:
            rows = knp.where(_column(kept), rows, 0)
        result = knp.scatter_add(knp.zeros((bags, rows.shape[1]), compute), bag, rows)
        if mode == _MEAN:
            result = knp.divide(result, _column(knp.maximum(sizes, 1)))
        if mode == _SUM:
            sizes = knp.zeros((bags,), DType.i64)
        max_indices = _fit(sizes, max_indices_type.shape, max_indices_type.dtype)
    offset2bag = _fit(bag, offset2bag_type.shape, offset2bag_type.dtype)
    return (
        knp.astype(result, out.dtype),
        offset2bag,
        _fit(sizes, bag_size_type.shape, index_dtype),
        max_indices,
    )


def _weight_gradient(
    ctx,
    grad,
    indices,
    bag,
    bag_size,
    maximum_indices,
    num_weights,
    scale_grad_by_freq,
    mode,
    per_sample_weights,
    padding_idx,
):
    """The dense gradient of the weight: each kept index's row gets its bag's gradient (times
    its sample weight for ``sum``, divided by the bag size for ``mean``); for ``max``, each
    column's gradient goes to the row that gave the maximum."""
    # torch's CPU kernel does not divide by each index's own frequency (it scales rows by the
    # counts of other indices); rather than copy that, the node runs on CPU
    require(
        not scale_grad_by_freq or mode == _MAX, "embedding_bag backward with scale_grad_by_freq"
    )
    dtype = compute_dtype(ctx.out_dtype)
    grad = knp.astype(grad, dtype)
    columns = grad.shape[1]
    indices = knp.astype(indices, DType.i64)
    kept = knp.not_equal(indices, padding_idx) if padding_idx >= 0 else None
    if mode == _MAX:
        nonempty = _column(knp.greater(bag_size, 0))
        positions = knp.add(
            knp.multiply(knp.astype(maximum_indices, DType.i64), columns), knp.arange(columns)
        )
        updates = knp.where(nonempty, grad, 0)
        flat = knp.scatter_add(
            knp.zeros((num_weights * columns,), dtype),
            knp.reshape(positions, (-1,)),
            knp.reshape(updates, (-1,)),
        )
        return knp.astype(knp.reshape(flat, (num_weights, columns)), ctx.out_dtype)
    rows = knp.take(grad, bag, axis=0)
    if per_sample_weights is not None:
        rows = knp.multiply(rows, _column(knp.astype(per_sample_weights, dtype)))
    if mode == _MEAN:
        rows = knp.divide(rows, _column(knp.maximum(knp.take(bag_size, bag), 1)))
    if kept is not None:
        rows = knp.where(_column(kept), rows, 0)
    return knp.astype(
        knp.scatter_add(knp.zeros((num_weights, columns), dtype), indices, rows), ctx.out_dtype
    )


def _bags_of(offset2bag, offsets, n: int, bags: int):
    """``offset2bag``, recomputed from the offsets when the forward's fast path left it empty."""
    bag = offset2bag if offset2bag.shape[0] == n else _bag_of_each_index(offsets, n)
    return knp.minimum(knp.maximum(knp.astype(bag, DType.i64), 0), max(bags - 1, 0))


@RULES.register(aten._embedding_bag_backward.default)
def embedding_bag_backward(
    ctx,
    grad,
    indices,
    offsets,
    offset2bag,
    bag_size,
    maximum_indices,
    num_weights,
    scale_grad_by_freq,
    mode,
    sparse,
    per_sample_weights,
    padding_idx=-1,
):
    require(not sparse, "embedding_bag with sparse=True (a sparse gradient)")
    bag = _bags_of(offset2bag, offsets, indices.shape[0], grad.shape[0])
    return _weight_gradient(
        ctx,
        grad,
        indices,
        bag,
        bag_size,
        maximum_indices,
        num_weights,
        scale_grad_by_freq,
        mode,
        per_sample_weights,
        padding_idx,
    )


@RULES.register(aten._embedding_bag_dense_backward.default)
def embedding_bag_dense_backward(
    ctx,
    grad,
    indices,
    offset2bag,
    bag_size,
    maximum_indices,
    num_weights,
    scale_grad_by_freq,
    mode,
    per_sample_weights,
    padding_idx=-1,
):
    bag = knp.astype(offset2bag, DType.i64)
    return _weight_gradient(
        ctx,
        grad,
        indices,
        bag,
        bag_size,
        maximum_indices,
        num_weights,
        scale_grad_by_freq,
        mode,
        per_sample_weights,
        padding_idx,
    )


@RULES.register(aten._embedding_bag_per_sample_weights_backward.default)
def embedding_bag_per_sample_weights_backward(
    ctx, grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1
):
    """Each sample weight's gradient: its bag's gradient dotted with its weight row (0 for padding)."""
    dtype = compute_dtype(ctx.out_dtype)
    indices = knp.astype(indices, DType.i64)
    bag = _bags_of(offset2bag, offsets, indices.shape[0], grad.shape[0])
    rows = knp.astype(knp.take(weight, indices, axis=0), dtype)
    dots = knp.sum(knp.multiply(knp.take(knp.astype(grad, dtype), bag, axis=0), rows), -1)
    if padding_idx >= 0:
        dots = knp.where(knp.not_equal(indices, padding_idx), dots, 0)
    return knp.astype(dots, ctx.out_dtype)
