"""Shape and layout ops: views, permutations, slicing, joining, padding and scatters into slices.

Kernels have value semantics, so ATen's views (``view``, ``expand``, ``permute``, ``slice``,
``select``, ``diagonal`` …) are ordinary functions of their input here, and strides never matter,
except to ``as_strided`` (and its backward, ``as_strided_scatter``), which address storage and
read their input's layout from the node. The common views of complex tensors are lowered on their
real views (``complex_pairs``): dims are torch's, counted without the trailing pair dimension.
Indices and bounds are normalised the way ATen does (negative values wrap, slice ends clamp).
Reflection and replication padding copy input positions computed at trace time (a ``take``
per padded dim); their backward adds the gradient back to those positions.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from . import complex_pairs
from .conventions import axes, inverse_permutation, require
from .opmath import compute_dtype
from .rules import RULES

aten = torch.ops.aten


def _along(rank: int, dim: int, item) -> tuple:
    """An index tuple applying ``item`` to axis ``dim`` only."""
    return (slice(None),) * (dim % rank) + (item,)


def _slice_bounds(size: int, start, end, step: int) -> tuple[int, int, int]:
    start, end, step = slice(start, end, step).indices(size)
    return start, max(start, end), step


@RULES.register(aten.view.default, aten.view_copy.default, complex=True)
def view(ctx, x, size):
    return knp.reshape(x, ctx.out.shape)


@RULES.register(aten.expand.default, complex=True)
def expand(ctx, x, size, *, implicit=False):
    return knp.broadcast_to(x, ctx.out.shape)


@RULES.register(aten.permute.default, aten.permute_copy.default, complex=True)
def permute(ctx, x, dims):
    if complex_pairs.arg_is_complex(ctx):  # the pair dimension stays last
        dims = [*(complex_pairs.dim(ctx, x, d) for d in dims), x.ndim - 1]
    return knp.transpose(x, dims)


@RULES.register(aten.unsqueeze.default, complex=True)
def unsqueeze(ctx, x, dim):
    return knp.expand_dims(x, complex_pairs.dim(ctx, x, dim, new=1))


@RULES.register(aten.squeeze.dim, aten.squeeze.dims, complex=True)
def squeeze(ctx, x, dim=None):
    if complex_pairs.arg_is_complex(ctx):
        dim = [complex_pairs.dim(ctx, x, d) for d in ([dim] if isinstance(dim, int) else dim)]
    return knp.squeeze(x, dim)


@RULES.register(aten.slice.Tensor, complex=True)
def slice_(ctx, x, dim=0, start=None, end=None, step=1):
    dim = complex_pairs.dim(ctx, x, dim)
    return x[_along(x.ndim, dim, slice(*_slice_bounds(x.shape[dim], start, end, step)))]


@RULES.register(aten.select.int, complex=True)
def select(ctx, x, dim, index):
    return x[_along(x.ndim, complex_pairs.dim(ctx, x, dim), index)]


@RULES.register(aten.narrow_copy.default)
def narrow_copy(ctx, x, dim, start, length):
    start += x.shape[dim] if start < 0 else 0
    return x[_along(x.ndim, dim, slice(start, start + length))]


@RULES.register(aten.unbind_copy.int)
def unbind_copy(ctx, x, dim=0):
    return tuple(x[_along(x.ndim, dim, k)] for k in range(x.shape[dim]))


@RULES.register(aten.split_with_sizes.default, complex=True)
def split_with_sizes(ctx, x, split_sizes, dim=0):
    dim = complex_pairs.dim(ctx, x, dim)
    offsets = [0, *itertools.accumulate(split_sizes)]
    return tuple(x[_along(x.ndim, dim, slice(a, b))] for a, b in zip(offsets, offsets[1:]))


@RULES.register(aten.cat.default, complex=True)
def cat(ctx, tensors, dim=0):
    if ctx.complex:  # real operands get a zero imaginary part, as torch promotes them
        flags = ctx.complex_args[0]
        rank = next(t.ndim - 1 for t, c in zip(tensors, flags) if c)
        pairs = [complex_pairs.pair(t, c, ctx.out_dtype) for t, c in zip(tensors, flags)]
        return knp.concatenate(pairs, axis=dim % rank)
    return knp.astype(knp.concatenate(tensors, axis=dim), ctx.out_dtype)


@RULES.register(aten.flip.default)
def flip(ctx, x, dims):
    return knp.flip(x, axes(dims, x.ndim)) if dims else x


@RULES.register(aten.repeat.default)
def repeat(ctx, x, repeats):
    """Tile: view as ``[1, d0, 1, d1, …]``, broadcast to ``[r0, d0, r1, d1, …]``, merge pairs."""
    shape = (1,) * (len(repeats) - x.ndim) + tuple(x.shape)
    interleaved = [n for d in shape for n in (1, d)]
    tiled = [n for r, d in zip(repeats, shape) for n in (r, d)]
    return knp.reshape(knp.broadcast_to(knp.reshape(x, interleaved), tiled), ctx.out.shape)


@RULES.register(aten.constant_pad_nd.default, complex=True)
def constant_pad_nd(ctx, x, pad, value=0):
    """``pad`` lists (before, after) pairs starting from the last dimension; a complex ``x``
    pads its real parts with ``value``'s and its imaginary parts with ``value``'s imaginary part."""
    rank = x.ndim - ctx.complex
    pairs = [(0, 0)] * (rank - len(pad) // 2) + [
        (pad[i], pad[i + 1]) for i in reversed(range(0, len(pad), 2))
    ]
    if not ctx.complex:
        return knp.pad(x, pairs, value)
    value = complex(value)
    return complex_pairs.join(
        knp.pad(x[..., complex_pairs.REAL], pairs, value.real),
        knp.pad(x[..., complex_pairs.IMAG], pairs, value.imag),
    )


def _reflect(positions: np.ndarray, size: int) -> np.ndarray:
    return size - 1 - np.abs(size - 1 - np.abs(positions))


def _replicate(positions: np.ndarray, size: int) -> np.ndarray:
    return np.clip(positions, 0, size - 1)


def _padded_sources(x_shape, padding, source):
    """For each padded dim (the last ``len(padding) // 2``, pairs given last dim first): the
    dim and the input position each output position copies."""
    for k in range(len(padding) // 2):
        dim = len(x_shape) - 1 - k
        low, high = padding[2 * k], padding[2 * k + 1]
        yield dim, source(np.arange(-low, x_shape[dim] + high), x_shape[dim])


def _index_pad(mode: str, source):
    def rule(ctx, x, padding):
        for dim, positions in _padded_sources(x.shape, padding, source):
            x = knp.take(x, positions, axis=dim)
        return x

    def backward(ctx, grad_output, x, padding):
        """Each output gradient is added to the input position it was copied from."""
        grad = grad_output
        for dim, positions in reversed(list(_padded_sources(x.shape, padding, source))):
            shape = [x.shape[dim] if d == dim else n for d, n in enumerate(grad.shape)]
            grad = knp.scatter_add(knp.zeros(shape, knp.dtype_of(grad)), positions, grad, axis=dim)
        return grad

    rule.__name__ = rule.__qualname__ = f"{mode}_pad"
    backward.__name__ = backward.__qualname__ = f"{mode}_pad_backward"
    for rank in (1, 2, 3):
        RULES.register(getattr(aten, f"{mode}_pad{rank}d").default)(rule)
        RULES.register(getattr(aten, f"{mode}_pad{rank}d_backward").default)(backward)


_index_pad("reflection", _reflect)
_index_pad("replication", _replicate)


def _diagonal_last(x, dim1: int, dim2: int) -> list[int]:
    """The permutation moving ``dim1, dim2`` last (where the diagonal ops work)."""
    d1, d2 = dim1 % x.ndim, dim2 % x.ndim
    return [*(d for d in range(x.ndim) if d not in (d1, d2)), d1, d2]


@RULES.register(aten.diagonal.default)
def diagonal(ctx, x, offset=0, dim1=0, dim2=1):
    """Move ``dim1, dim2`` last, flatten them and take every ``(n2 + 1)``-th element."""
    moved = knp.transpose(x, _diagonal_last(x, dim1, dim2))
    n1, n2 = moved.shape[-2:]
    flat = knp.reshape(moved, [*moved.shape[:-2], n1 * n2])
    first = max(-offset, 0) * n2 + max(offset, 0)
    index = knp.add(knp.multiply(knp.arange(ctx.out.shape[-1]), n2 + 1), first)
    return knp.take(flat, index, axis=-1)


@RULES.register(aten.diagonal_scatter.default)
def diagonal_scatter(ctx, x, src, offset=0, dim1=0, dim2=1):
    """Spread ``src`` along the rows (element ``k`` to row ``k + max(-offset, 0)``) and keep it
    where ``column - row == offset``."""
    if src.shape[-1] == 0:
        return x
    perm = _diagonal_last(x, dim1, dim2)
    moved = knp.transpose(x, perm)
    n1, n2 = moved.shape[-2:]
    rows = knp.arange(n1)
    on_diagonal = knp.equal(
        knp.subtract(knp.reshape(knp.arange(n2), (1, n2)), knp.reshape(rows, (n1, 1))), offset
    )
    source = knp.minimum(knp.maximum(knp.subtract(rows, max(-offset, 0)), 0), src.shape[-1] - 1)
    placed = knp.take(knp.astype(src, knp.dtype_of(x)), source, axis=-1)
    placed = knp.broadcast_to(knp.expand_dims(placed, -1), moved.shape)
    return knp.transpose(knp.where(on_diagonal, placed, moved), inverse_permutation(perm))


def _scatter_slice(x, src, dim: int, start: int, end: int, step: int):
    """``x`` with ``x[..., start:end:step, ...] = src`` along ``dim``."""
    dim %= x.ndim
    if src.shape[dim] == 0:
        return x
    src = knp.astype(src, knp.dtype_of(x))
    if step == 1:
        pieces = [
            x[_along(x.ndim, dim, slice(0, start))],
            src,
            x[_along(x.ndim, dim, slice(end, None))],
        ]
        return knp.concatenate([p for p in pieces if p.shape[dim]], axis=dim)
    size = x.shape[dim]
    positions = knp.arange(size)
    hit = knp.logical_and(
        knp.logical_and(knp.greater_equal(positions, start), knp.less(positions, end)),
        knp.equal(knp.remainder(knp.subtract(positions, start), step), 0),
    )
    source = knp.minimum(
        knp.maximum(knp.floor_divide(knp.subtract(positions, start), step), 0), src.shape[dim] - 1
    )
    placed = knp.take(src, source, axis=dim)
    mask = knp.reshape(hit, [size if d == dim else 1 for d in range(x.ndim)])
    return knp.where(mask, placed, x)


@RULES.register(aten.slice_scatter.default, complex=True)
def slice_scatter(ctx, x, src, dim=0, start=None, end=None, step=1):
    dim = complex_pairs.dim(ctx, x, dim)
    return _scatter_slice(x, src, dim, *_slice_bounds(x.shape[dim], start, end, step))


@RULES.register(aten.select_scatter.default, complex=True)
def select_scatter(ctx, x, src, dim, index):
    dim = complex_pairs.dim(ctx, x, dim)
    index %= x.shape[dim]
    return _scatter_slice(x, knp.expand_dims(src, dim), dim, index, index + 1, 1)


class _Strided:
    """The storage elements ``as_strided(x, size, stride, storage_offset)`` addresses, as flat
    positions in ``x``. The kernel holds ``x`` row-major, which is its storage only when ``x``
    is contiguous; the elements must lie within ``x`` (storage beyond it, under a sliced view,
    is not in the kernel). Strides are static, so all of this is checked at lowering time."""

    def __init__(self, ctx, x, size, stride, storage_offset):
        layout = ctx.layouts[0] if ctx.layouts else None
        require(
            layout is not None and layout.contiguous,
            "as_strided of a non-contiguous tensor (its storage order is not the kernel's)",
        )
        require(
            storage_offset is None or not layout.graph_input,
            "as_strided with an explicit storage_offset of a graph input (its own offset in "
            "storage can differ from call to call, and nothing re-checks it)",
        )
        self.size, self.stride = tuple(size), tuple(stride)
        self.offset = (
            layout.storage_offset if storage_offset is None else storage_offset
        ) - layout.storage_offset
        self.count = math.prod(size)
        last = self.offset + sum((n - 1) * s for n, s in zip(size, stride))
        require(
            self.count == 0 or (0 <= self.offset and last < x.size),
            f"as_strided reads storage elements {self.offset}..{last} outside the tensor's {x.size}",
        )
        dense = [math.prod(size[k + 1 :]) for k in range(len(size))]
        #: the elements are x's, consecutive from ``offset``: a slice and a reshape
        self.contiguous = all(s == d for n, s, d in zip(size, stride, dense) if n > 1)

    def positions(self):
        """The flat positions, shaped ``size`` (computed in the kernel from ``iota``)."""
        positions = self.offset
        for k, (n, s) in enumerate(zip(self.size, self.stride)):
            coord = knp.reshape(knp.arange(n), [n if a == k else 1 for a in range(len(self.size))])
            positions = knp.add(positions, knp.multiply(coord, s))
        return knp.broadcast_to(positions, self.size)

    def overlaps(self) -> bool:
        """Whether two result elements share a storage element (checked on the static strides)."""
        grids = np.meshgrid(
            *(np.arange(n) * s for n, s in zip(self.size, self.stride)), indexing="ij"
        )
        flat = sum(grids, np.zeros(self.size, np.int64)).reshape(-1)
        return len(np.unique(flat)) < flat.size


@RULES.register(aten.as_strided.default, aten.as_strided_copy.default)
def as_strided(ctx, x, size, stride, storage_offset=None):
    """Element ``i`` of the result is storage element ``offset + Σ i_k · stride_k`` (``_Strided``);
    a contiguous result is a slice and a reshape, anything else a gather."""
    strided = _Strided(ctx, x, size, stride, storage_offset)
    if strided.count == 0:
        return knp.zeros(size, knp.dtype_of(x))
    flat = knp.reshape(x, (-1,))
    if strided.contiguous:
        return knp.reshape(flat[strided.offset : strided.offset + strided.count], size)
    return knp.take(flat, strided.positions())


@RULES.register(aten.as_strided_scatter.default)
def as_strided_scatter(ctx, x, src, size, stride, storage_offset=None):
    """``x`` with the elements ``as_strided`` addresses replaced by ``src`` (``as_strided``'s
    backward). Overlapping strides write one element several times, in an order ATen does not
    define: declined."""
    strided = _Strided(ctx, x, size, stride, storage_offset)
    if strided.count == 0:
        return x
    require(not strided.overlaps(), "as_strided_scatter with overlapping strides")
    flat = knp.reshape(x, (-1,))
    values = knp.reshape(knp.astype(src, knp.dtype_of(x)), (-1,))
    if strided.contiguous:
        start, end = strided.offset, strided.offset + strided.count
        updated = knp.concatenate([flat[:start], values, flat[end:]])
    else:
        positions = knp.reshape(strided.positions(), (-1,))
        placed = knp.scatter_add(knp.zeros(flat.shape, knp.dtype_of(x)), positions, values)
        written = knp.scatter_add(
            knp.zeros(flat.shape, DType.i32), positions, knp.ones(positions.shape, DType.i32)
        )
        updated = knp.where(knp.greater(written, 0), placed, flat)
    return knp.reshape(updated, x.shape)


def _windows(length: int, size: int, step: int) -> np.ndarray:
    """The positions ``unfold`` reads along its dim: one row per window."""
    starts = np.arange(0, length - size + 1, step) if length >= size else np.arange(0)
    return starts[:, None] + np.arange(size)[None, :]


@RULES.register(aten.unfold.default, complex=True)
def unfold(ctx, x, dimension, size, step):
    """Windows of ``size`` every ``step`` along ``dimension`` (a ``take`` of their positions),
    the position within a window as a new last dim."""
    rank = x.ndim - ctx.complex
    if rank == 0:  # a 0-d tensor is one window of one element
        return knp.reshape(x, ctx.out.shape)
    dim = dimension % rank
    windows = knp.take(x, _windows(x.shape[dim], size, step), axis=dim)
    order = [d for d in range(windows.ndim) if d != dim + 1]
    order.insert(rank, dim + 1)
    return knp.transpose(windows, order)


@RULES.register(aten.unfold_backward.default, complex=True)
def unfold_backward(ctx, grad, input_sizes, dim, size, step):
    """Each window's gradient added back to the positions it read (``scatter_add``, in f32 for
    half floats)."""
    rank = len(input_sizes)
    if rank == 0:
        return knp.reshape(grad, ctx.out.shape)
    dim %= rank
    positions = _windows(input_sizes[dim], size, step)
    order = list(range(grad.ndim))
    order.insert(dim + 1, order.pop(rank))
    moved = knp.transpose(grad, order)
    shape = list(moved.shape)
    flat = knp.reshape(moved, [*shape[:dim], positions.size, *shape[dim + 2 :]])
    compute = compute_dtype(ctx.out_dtype)
    summed = knp.scatter_add(knp.zeros(ctx.out.shape, compute), positions.reshape(-1), flat, dim)
    return knp.astype(summed, ctx.out_dtype)
