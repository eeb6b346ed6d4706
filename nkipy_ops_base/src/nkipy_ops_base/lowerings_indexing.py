"""Gathers and scatters: ``index_select``, ``gather``, ``embedding``, advanced indexing
(``index.Tensor``, ``index_put``), ``scatter``/``scatter_add``/``scatter_reduce``,
``index_reduce``, ``put``, ``masked_scatter`` and its backward, ``nonzero_static``; and searching
sorted sequences.

Everything is expressed with the ``take``, ``take_along_axis`` and ``scatter_add`` primitives,
and ``scatter_reduce`` for the ``amax``/``amin``/``prod`` reductions. Multi-dimensional and
elementwise scatters address a flattened tensor with linear indices. A scatter that overwrites
(``index_put`` without ``accumulate``, ``scatter``, ``max_unpool``'s decomposition) places the
largest of the values written to each position: one of them, as ATen promises no more when
indices repeat, and exactly the value when the repeats write equal values (``max_unpool`` of
overlapping pooling windows, whose repeated indices carry the same maximum). ``index_put`` with one boolean mask (``x[mask] = v``) is a
``where``; reading with a boolean mask has a data-dependent shape and is declined, but a
static number of the masked elements (``nonzero_static``, ``masked_scatter``'s backward) is
gathered to the front by a scatter to their rank among the true elements. Searching
sorted sequences (``bucketize``, ``searchsorted``) counts the boundaries below each value.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from . import complex_pairs
from .conventions import inverse_permutation, require
from .opmath import is_array
from .rules import RULES

aten = torch.ops.aten


def _strides(shape) -> list[int]:
    return [math.prod(shape[i + 1 :]) for i in range(len(shape))]


def _wrap(index, size: int):
    """Negative indices count from the end, as in Python and ``index.Tensor``."""
    index = knp.astype(index, DType.i64)
    return knp.where(knp.less(index, 0), knp.add(index, size), index)


def _rank_in_mask(flat_mask, limit: int):
    """For each element of a 1-D mask, how many true elements precede it, clipped to
    ``[0, limit)``: which of ``limit`` consecutive values a true position receives."""
    position = knp.subtract(knp.cumsum(knp.astype(flat_mask, DType.i64), 0), 1)
    return knp.minimum(knp.maximum(position, 0), limit - 1)


def _overwrite(x, flat_index, values):
    """``x`` (1-D or leading-axis) with ``values`` written at ``flat_index`` along axis 0; a
    position written several times gets the largest value (NaN if one is NaN).

    The hits are counted in f32 (exact up to 2**24 writes to one position): Neuron has no
    integer scatter-add, and counting in f32 keeps a float overwrite on the device."""
    dtype = knp.dtype_of(x)
    lowest = -np.inf if dtype.is_float else (np.iinfo(dtype.numpy).min if dtype.is_integer else 0)
    placed = knp.scatter_reduce(knp.full(x.shape, lowest, dtype), flat_index, values, "max")
    hits = knp.scatter_add(
        knp.zeros((x.shape[0],), DType.f32), flat_index, knp.full(flat_index.shape, 1, DType.f32)
    )
    written = knp.reshape(knp.greater(hits, 0), (x.shape[0],) + (1,) * (x.ndim - 1))
    return knp.where(written, placed, x)


# -- whole-slice gathers -------------------------------------------------------------------------


@RULES.register(aten.index_select.default, complex=True)
def index_select(ctx, x, dim, index):
    if x.ndim == ctx.complex:  # a 0-d tensor: the only valid index is 0
        return x
    return knp.take(x, knp.reshape(index, (-1,)), axis=complex_pairs.dim(ctx, x, dim))


@RULES.register(aten.embedding.default)
def embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return knp.take(weight, indices, axis=0)


@RULES.register(aten.embedding_dense_backward.default)
def embedding_dense_backward(
    ctx, grad_output, indices, num_weights, padding_idx, scale_grad_by_freq
):
    """Rows of the gradient added to the weight rows they were read from; the ``padding_idx``
    row gets none, and with ``scale_grad_by_freq`` each is divided by its index's frequency."""
    flat = knp.reshape(knp.astype(indices, DType.i64), (-1,))
    grad = knp.reshape(grad_output, (flat.shape[0], -1))
    if padding_idx >= 0:
        grad = knp.where(knp.expand_dims(knp.equal(flat, padding_idx), -1), 0, grad)
    if scale_grad_by_freq:
        counts = knp.scatter_add(
            knp.zeros((num_weights,), DType.i64), flat, knp.ones(flat.shape, DType.i64)
        )
        grad = knp.divide(grad, knp.expand_dims(knp.take(counts, flat), -1))
    grad = knp.astype(grad, ctx.out_dtype)
    return knp.scatter_add(knp.zeros(ctx.out.shape, ctx.out_dtype), flat, grad)


# -- advanced indexing ---------------------------------------------------------------------------


class _Advanced:
    """``x[indices]`` for ATen's ``Tensor?[] indices``: the indexed dims are moved first and
    merged into one, addressed by a linear index of the broadcast index shape ``batch``."""

    def __init__(self, x, indices):
        indices = list(indices) + [None] * (x.ndim - len(indices))
        self.advanced = [d for d, i in enumerate(indices) if i is not None]
        self.rest = [d for d, i in enumerate(indices) if i is None]
        require(
            all(knp.dtype_of(indices[d]).is_integer for d in self.advanced),
            "boolean-mask indexing has a data-dependent shape",
        )
        self.batch = tuple(np.broadcast_shapes(*(indices[d].shape for d in self.advanced)))
        self.sizes = [x.shape[d] for d in self.advanced]
        self.rest_shape = [x.shape[d] for d in self.rest]
        flat = 0
        for d, size in zip(self.advanced, self.sizes):
            flat = knp.add(knp.multiply(flat, size), _wrap(indices[d], size))
        self.flat = knp.reshape(knp.broadcast_to(flat, self.batch), (-1,))
        moved = knp.transpose(x, self.advanced + self.rest)
        self.merged = knp.reshape(moved, [math.prod(self.sizes)] + self.rest_shape)
        # Adjacent indexed dims keep their place in the result; separated ones go first.
        contiguous = self.advanced == list(range(self.advanced[0], self.advanced[-1] + 1))
        self.position = self.advanced[0] if contiguous else 0
        nb, nr = len(self.batch), len(self.rest)
        self.to_result = [
            *range(nb, nb + self.position),
            *range(nb),
            *range(nb + self.position, nb + nr),
        ]

    def gather(self):
        taken = knp.take(self.merged, self.flat, axis=0)
        return knp.transpose(knp.reshape(taken, [*self.batch, *self.rest_shape]), self.to_result)

    def scatter(self, values, accumulate: bool):
        """The whole tensor with ``values`` put at the indexed positions."""
        result_shape = [
            *self.rest_shape[: self.position],
            *self.batch,
            *self.rest_shape[self.position :],
        ]
        values = knp.broadcast_to(knp.astype(values, knp.dtype_of(self.merged)), result_shape)
        values = knp.reshape(
            knp.transpose(values, inverse_permutation(self.to_result)), [-1, *self.rest_shape]
        )
        if accumulate:
            merged = knp.scatter_add(self.merged, self.flat, values)
        else:
            merged = _overwrite(self.merged, self.flat, values)
        unmerged = knp.reshape(merged, [*self.sizes, *self.rest_shape])
        return knp.transpose(unmerged, inverse_permutation(self.advanced + self.rest))


@RULES.register(aten.index.Tensor)
def index(ctx, x, indices):
    return _Advanced(x, indices).gather()


def _masked_put(x, dim: int, mask, values, accumulate: bool):
    """``x[..., mask, ...] = values`` for a boolean ``mask`` over dims ``dim …``: the selected
    positions take consecutive ``values`` rows in row-major order (or one broadcast row)."""
    rest = x.shape[dim + mask.ndim :]
    rank = dim + 1 + len(rest)
    values = knp.reshape(
        knp.astype(values, knp.dtype_of(x)), (1,) * (rank - values.ndim) + tuple(values.shape)
    )
    flat_mask = knp.reshape(mask, (-1,))
    position = _rank_in_mask(flat_mask, values.shape[dim])
    rows = knp.broadcast_to(
        knp.take(values, position, axis=dim), (*x.shape[:dim], flat_mask.shape[0], *rest)
    )
    rows = knp.reshape(rows, x.shape)
    selected = knp.reshape(mask, (1,) * dim + tuple(mask.shape) + (1,) * len(rest))
    if accumulate:
        return knp.add(x, knp.where(selected, rows, knp.zeros((), knp.dtype_of(x))))
    return knp.where(selected, rows, x)


@RULES.register(aten.index_put.default)
def index_put(ctx, x, indices, values, accumulate=False):
    given = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(given) == 1 and knp.dtype_of(given[0][1]) is DType.bool and given[0][1].ndim:
        return _masked_put(x, *given[0], values, accumulate)
    return _Advanced(x, indices).scatter(values, accumulate)


# -- elementwise gathers and scatters --------------------------------------------------------------


def _leading(x, shape, skip: int | None = None):
    """``x`` cut to the leading ``shape`` (ATen lets index tensors be smaller than the data)."""
    return x[tuple(slice(None) if d == skip else slice(0, n) for d, n in enumerate(shape))]


@RULES.register(aten.gather.default)
def gather(ctx, x, dim, index, *, sparse_grad=False):
    if x.ndim == 0:
        return x
    dim %= x.ndim
    return knp.take_along_axis(_leading(x, index.shape, skip=dim), index, axis=dim)


def _linear_positions(shape, dim: int, index):
    """Flat positions in a tensor of ``shape`` of the elements ``index`` addresses along ``dim``."""
    flat = 0
    for a, stride in enumerate(_strides(shape)):
        if a == dim:
            coord = index
        else:
            coord = knp.reshape(
                knp.arange(index.shape[a]), [n if b == a else 1 for b, n in enumerate(index.shape)]
            )
        flat = knp.add(flat, knp.multiply(coord, stride))
    return knp.reshape(knp.broadcast_to(flat, index.shape), (-1,))


def _scatter(x, dim, index, src, how: str):
    require(x.ndim > 0, "scatter into a 0-d tensor")
    dim %= x.ndim
    positions = _linear_positions(x.shape, dim, knp.astype(index, DType.i64))
    flat_x = knp.reshape(x, (-1,))
    if is_array(src):
        src = _leading(src, index.shape)
    updates = knp.reshape(knp.broadcast_to(knp.astype(src, knp.dtype_of(x)), index.shape), (-1,))
    if how == "add":
        out = knp.scatter_add(flat_x, positions, updates)
    else:
        out = _overwrite(flat_x, positions, updates)
    return knp.reshape(out, x.shape)


@RULES.register(aten.scatter_add.default)
def scatter_add(ctx, x, dim, index, src):
    return _scatter(x, dim, index, src, "add")


@RULES.register(aten.scatter.src, aten.scatter.value)
def scatter(ctx, x, dim, index, src):
    return _scatter(x, dim, index, src, "set")


@RULES.register(aten.scatter_reduce.two)
def scatter_reduce(ctx, x, dim, index, src, reduce, *, include_self=True):
    """``sum`` and ``mean`` through ``scatter_add``; ``amax``, ``amin`` and ``prod`` through
    the ``scatter_reduce`` primitive, on ``x`` flattened."""
    require(x.ndim > 0, "scatter into a 0-d tensor")
    if reduce in _COMBINE:
        return _scatter_combine(x, dim, index, src, reduce, include_self)
    base = (
        x
        if include_self
        else _scatter(x, dim, index, knp.zeros(index.shape, knp.dtype_of(x)), "set")
    )
    total = _scatter(base, dim, index, src, "add")
    if reduce == "sum":
        return total
    ones = knp.ones(index.shape, knp.dtype_of(x))
    count = _scatter(
        knp.full(x.shape, 1 if include_self else 0, knp.dtype_of(x)), dim, index, ones, "add"
    )
    return _mean(total, count)


def _mean(total, count):
    """``total / count`` for a scatter ``mean``: an untouched position (count 0) keeps its
    value, and integers divide with floor, as torch's kernels do."""
    count = knp.maximum(count, 1)
    if knp.dtype_of(total).is_float:
        return knp.divide(total, count)
    return knp.floor_divide(total, count)


#: ATen reduction name -> (``scatter_reduce`` primitive kind, identity as the extreme of a dtype)
_COMBINE = {"amax": ("max", "min"), "amin": ("min", "max"), "prod": ("prod", None)}


def _identity(dtype: DType, extreme: str | None):
    """The value a reduction starts a position at when ``include_self=False``."""
    if extreme is None:
        return 1
    if dtype.is_float:
        return -math.inf if extreme == "min" else math.inf
    info = np.iinfo(dtype.numpy)
    return int(info.min if extreme == "min" else info.max)


def _hit(size: int, index, rank: int, axis: int):
    """Which of ``size`` positions along ``axis`` the 1-D ``index`` reaches, shaped to broadcast
    against a tensor of ``rank``."""
    hits = knp.scatter_add(knp.zeros((size,), DType.i32), index, knp.ones(index.shape, DType.i32))
    return knp.reshape(knp.greater(hits, 0), [size if a == axis else 1 for a in range(rank)])


def _combine(x, index, updates, reduce: str, include_self: bool, axis: int):
    """``x`` with ``updates`` reduced in at the 1-D ``index`` along ``axis`` (``amax``, ``amin``,
    ``prod``); without ``include_self``, the positions hit start from the reduction's identity."""
    kind, extreme = _COMBINE[reduce]
    if not include_self:
        identity = _identity(knp.dtype_of(x), extreme)
        x = knp.where(_hit(x.shape[axis], index, x.ndim, axis), identity, x)
    return knp.scatter_reduce(x, index, updates, kind, axis)


def _scatter_combine(x, dim: int, index, src, reduce: str, include_self: bool):
    """``scatter_reduce`` with ``amax``/``amin``/``prod``, on ``x`` flattened."""
    dim %= x.ndim
    positions = _linear_positions(x.shape, dim, knp.astype(index, DType.i64))
    source = _leading(src, index.shape) if is_array(src) else src
    updates = knp.reshape(knp.broadcast_to(knp.astype(source, knp.dtype_of(x)), index.shape), (-1,))
    return knp.reshape(
        _combine(knp.reshape(x, (-1,)), positions, updates, reduce, include_self, 0), x.shape
    )


@RULES.register(aten.scatter.reduce, aten.scatter.value_reduce)
def scatter_with_reduce(ctx, x, dim, index, src, *, reduce):
    """``scatter``'s older ``reduce=`` form: ``"add"`` or ``"multiply"`` into ``x``."""
    require(x.ndim > 0, "scatter into a 0-d tensor")
    if reduce == "add":
        return _scatter(x, dim, index, src, "add")
    return _scatter_combine(x, dim, index, src, "prod", include_self=True)


@RULES.register(aten.index_reduce.default)
def index_reduce(ctx, x, dim, index, source, reduce, *, include_self=True):
    """``x`` with slices of ``source`` reduced into the slices ``index`` names along ``dim``."""
    if x.ndim == 0:
        x, source, dim = knp.reshape(x, (1,)), knp.reshape(source, (-1,)), 0
    dim %= x.ndim
    index = knp.reshape(knp.astype(index, DType.i64), (-1,))
    source = knp.astype(source, knp.dtype_of(x))
    if reduce in _COMBINE:
        out = _combine(x, index, source, reduce, include_self, dim)
    else:  # mean
        hit = _hit(x.shape[dim], index, x.ndim, dim)
        base = x if include_self else knp.where(hit, knp.zeros((), knp.dtype_of(x)), x)
        total = knp.scatter_add(base, index, source, axis=dim)
        ones = knp.ones(index.shape, DType.i64)
        count = knp.scatter_add(
            knp.full((x.shape[dim],), 1 if include_self else 0, DType.i64), index, ones
        )
        out = _mean(
            total, knp.reshape(count, [x.shape[dim] if a == dim else 1 for a in range(x.ndim)])
        )
    return knp.reshape(out, ctx.out.shape)


@RULES.register(aten.put.default)
def put(ctx, x, index, source, accumulate=False):
    """``x.flatten()[index] = source`` (negative indices wrap), then ``x``'s shape again."""
    flat_x = knp.reshape(x, (-1,))
    positions = _wrap(knp.reshape(index, (-1,)), flat_x.shape[0])
    updates = knp.reshape(knp.astype(source, knp.dtype_of(x)), (-1,))
    out = (
        knp.scatter_add(flat_x, positions, updates)
        if accumulate
        else _overwrite(flat_x, positions, updates)
    )
    return knp.reshape(out, x.shape)


@RULES.register(aten.masked_scatter.default)
def masked_scatter(ctx, x, mask, source):
    """Consecutive ``source`` elements go to the true positions of ``mask``, in row-major order."""
    shape = ctx.out.shape
    flat_mask = knp.reshape(knp.broadcast_to(mask, shape), (-1,))
    flat_x = knp.reshape(knp.broadcast_to(x, shape), (-1,))
    if source.size == 0:
        return knp.reshape(flat_x, shape)
    taken = knp.take(knp.reshape(source, (-1,)), _rank_in_mask(flat_mask, source.size))
    return knp.reshape(knp.where(flat_mask, knp.astype(taken, knp.dtype_of(x)), flat_x), shape)


def _compact(flat_mask, values, count: int, fill):
    """The first ``count`` elements of 1-D ``values`` where ``flat_mask`` holds, in order, and
    ``fill`` after the last one: each true element is scattered to its rank among the true
    elements (a cumsum), the others and the true ones past ``count`` to a dropped extra slot.
    Each kept slot receives one value, so the scatter-add places it exactly."""
    rank = knp.subtract(knp.cumsum(knp.astype(flat_mask, DType.i64), 0), 1)
    kept = knp.logical_and(flat_mask, knp.less(rank, count))
    slot = knp.where(kept, rank, count)
    dtype = knp.dtype_of(values)
    placed = knp.scatter_add(knp.zeros((count + 1,), dtype), slot, knp.where(kept, values, 0))
    filled = knp.scatter_add(knp.zeros((count + 1,), DType.f32), slot, knp.astype(kept, DType.f32))
    return knp.where(knp.greater(filled[:count], 0), placed[:count], knp.asarray(fill, dtype))


@RULES.register(aten.nonzero_static.default)
def nonzero_static(ctx, x, *, size, fill_value=-1):
    """The coordinates of the first ``size`` nonzero elements (row-major), one row each, and rows
    of ``fill_value`` past the last one."""
    flat_mask = knp.not_equal(knp.reshape(x, (-1,)), 0)
    flat_index = knp.arange(flat_mask.shape[0], DType.i64)
    found = _compact(flat_mask, flat_index, size, -1)
    columns = [
        knp.remainder(knp.floor_divide(found, stride), extent)
        for stride, extent in zip(_strides(x.shape), x.shape, strict=True)
    ]
    coordinates = knp.stack(columns, axis=1) if columns else knp.zeros((size, 0), DType.i64)
    missing = knp.expand_dims(knp.less(found, 0), 1)
    return knp.astype(knp.where(missing, fill_value, coordinates), ctx.out_dtype)


@RULES.register(aten.masked_scatter_backward.default)
def masked_scatter_backward(ctx, grad, mask, sizes):
    """The gradient of ``masked_scatter``'s ``source``: the gradient at the true positions of
    ``mask``, in row-major order, then zeros, in the source's shape."""
    flat_mask = knp.reshape(knp.broadcast_to(mask, grad.shape), (-1,))
    count = math.prod(sizes)
    if count == 0:
        return knp.zeros(ctx.out.shape, ctx.out_dtype)
    flat = _compact(flat_mask, knp.reshape(grad, (-1,)), count, 0)
    return knp.reshape(flat, ctx.out.shape)


# -- searching sorted sequences --------------------------------------------------------------------


def _insertion_points(ctx, boundaries, values, right: bool):
    """How many boundaries lie below each value (``<``, or ``<=`` if ``right``): its insertion
    point. ``boundaries`` is 1-D, or sorted along its last dim with ``values``' leading dims.
    NaN sorts last, as in torch. A Python number is a 0-d tensor of its own type, promoted with
    the boundaries: against half floats it is rounded to their dtype, as torch compares."""
    if not knp.is_traced(values) and not isinstance(values, np.ndarray):
        values = knp.asarray(values, knp.result_type(boundaries, np.asarray(values)))
    values = knp.asarray(values)
    if boundaries.ndim == 1:
        edges = knp.reshape(boundaries, (1,) * values.ndim + tuple(boundaries.shape))
    else:
        edges = knp.expand_dims(boundaries, -2)
    below = (knp.less_equal if right else knp.less)(edges, knp.expand_dims(values, -1))
    count = knp.sum(below, -1)
    count = knp.where(knp.isnan(values), boundaries.shape[-1], count)
    return knp.astype(count, ctx.out_dtype)


@RULES.register(aten.bucketize.Tensor, aten.bucketize.Scalar)
def bucketize(ctx, x, boundaries, *, out_int32=False, right=False):
    return _insertion_points(ctx, boundaries, x, right)


@RULES.register(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def searchsorted(ctx, sorted_sequence, x, *, out_int32=False, right=False, side=None, sorter=None):
    """With ``sorter``, the boundaries are ``sorted_sequence`` permuted by it along the last dim."""
    if sorter is not None:
        sorted_sequence = knp.take_along_axis(sorted_sequence, knp.astype(sorter, DType.i64), -1)
    return _insertion_points(ctx, sorted_sequence, x, right or side == "right")
