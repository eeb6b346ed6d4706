"""Histograms: ``histc``, ``histogram`` and ``histogramdd`` (bin counts or given bin edges).

The result has a static shape (``bins``) even when the range comes from the data (``histc``
with ``min == max``, ``histogram`` without ``range``): the kernel reduces the input to its
minimum and maximum and bins against those. Each element's bin is found as torch's CPU kernel
finds it, then counted with a ``scatter_add`` (elements outside the range, and NaNs, add 0):

* ``histc``: ``floor((x - lo) · bins / (hi - lo))``, the last bin closed on the right. Half
  floats round after each operation, as torch's kernel does on its half-float scalars, so
  elements land in the same bins bit for bit.
* ``histogram`` with a bin count: the same estimate, then corrected against the edges next to
  it (torch's local search), so the bins agree with the returned edges. The edges are
  ``lo + i · step`` (the upper half from ``hi`` down); torch forms these with one rounding, the
  kernel with two, so an edge may differ by one unit in the last place, and an element within
  one unit of an edge may then be counted in the neighbouring bin.
* ``histogram`` with given edges: an element's bin is the number of edges at or below it,
  less one (a compare against every edge: declined past 2**24 element-edge pairs).

An empty range is widened as torch widens it: by 1 on each side for ``histc``, by 0.5 for
``histogram``. Counts accumulate in the result's dtype, as torch's do (a bf16 count stops at
256). torch raises when a data range is not finite (NaN or infinite elements); the kernel
cannot raise and returns counts against that range.
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

#: element-edge comparisons a histogram with given edges may make
_MAX_PAIRS = 2**24


def _rounded(dtype: DType):
    """``v`` rounded to ``dtype`` and computed on at its compute dtype (identity for f32/f64)."""
    compute = compute_dtype(dtype)
    return lambda v: knp.astype(knp.astype(v, dtype), compute)


def _range(x, low, high, widen: float, dtype: DType):
    """The outer edges, rounded to ``dtype``: ``low`` and ``high`` (numbers, or ``None`` for the
    data's minimum and maximum: ``[0, 1]`` without data), widened by ``widen`` on each side
    when they are equal."""
    compute = compute_dtype(dtype)
    if low is None and x.size:
        low, high = knp.min(x, keepdims=False), knp.max(x, keepdims=False)
    elif low is None:
        low, high = 0.0, 1.0
    low, high = (knp.astype(knp.astype(v, dtype), compute) for v in (low, high))
    empty = knp.equal(low, high)
    r = _rounded(dtype)
    return (
        r(knp.where(empty, knp.subtract(low, widen), low)),
        r(knp.where(empty, knp.add(high, widen), high)),
    )


def _estimate(x, low, high, bins: int, dtype: DType):
    """``floor((x - low) · bins / (high - low))`` rounded after each operation, as int32."""
    r = _rounded(dtype)
    scaled = r(
        knp.divide(r(knp.multiply(r(knp.subtract(x, low)), bins)), r(knp.subtract(high, low)))
    )
    return knp.astype(knp.floor(scaled), DType.i32)


def _count(parts, weight, dtype: DType):
    """Per bin, the count (or weight sum) of the elements inside the range of every
    dimension; ``parts`` holds per dimension ``(x, bin_index, low, high, bins)``, all of the
    elements' shape. The bins of the dimensions combine into one index into the flattened
    result (row-major), so one ``scatter_add`` counts them."""
    inside, flat = None, None
    for x, bin_index, low, high, bins in parts:
        within = knp.logical_and(knp.greater_equal(x, low), knp.less_equal(x, high))
        inside = within if inside is None else knp.logical_and(inside, within)
        index = knp.minimum(knp.maximum(bin_index, 0), bins - 1)  # the last bin is closed
        flat = index if flat is None else knp.add(knp.multiply(flat, bins), index)
    shape = tuple(part[-1] for part in parts)
    one = knp.ones(inside.shape, dtype) if weight is None else knp.astype(weight, dtype)
    added = knp.where(inside, one, knp.zeros((), dtype))
    hist = knp.scatter_add(
        knp.zeros((math.prod(shape),), dtype), knp.reshape(flat, (-1,)), knp.reshape(added, (-1,))
    )
    return knp.reshape(hist, shape)


@RULES.register(aten.histc.default)
def histc(ctx, x, bins=100, min=0, max=0):  # noqa: A002 - ATen's names
    dtype = ctx.out_dtype
    xs = knp.astype(x, compute_dtype(dtype))
    low, high = _range(xs, *((None, None) if min == max else (min, max)), 1, dtype)
    return _count([(xs, _estimate(xs, low, high, bins, dtype), low, high, bins)], None, dtype)


def _linear_edges(low, high, bins: int, dtype: DType):
    """``bins + 1`` edges from ``low`` to ``high``: ``low + i · step`` for the lower half,
    ``high - (bins - i) · step`` for the upper (torch's ``linspace``)."""
    step = knp.divide(knp.subtract(high, low), bins)
    i = knp.arange(bins + 1, compute_dtype(dtype))
    lower = knp.add(low, knp.multiply(step, i))
    upper = knp.subtract(high, knp.multiply(step, knp.subtract(bins, i)))
    return knp.astype(knp.where(knp.less(i, (bins + 1) // 2), lower, upper), dtype)


def _linear_part(xs, bins: int, limits, dtype: DType):
    """One dimension binned against ``bins`` equal bins over ``limits`` (``None`` for the
    data's range): its ``_count`` part and its edges. The bin is the estimate corrected by
    torch's local search: among the edges ``estimate - 1 .. estimate + 1``, the last one
    ``<= x``."""
    low, high = _range(xs, *((None, None) if limits is None else limits), 0.5, dtype)
    edges = _linear_edges(low, high, bins, dtype)
    estimate = knp.minimum(knp.maximum(_estimate(xs, low, high, bins, dtype), 0), bins)
    start = knp.maximum(knp.subtract(estimate, 1), 0)
    index = knp.subtract(start, 1)
    for offset in (0, 1, 2):
        j = knp.add(start, offset)
        valid = knp.logical_and(knp.less_equal(j, bins), knp.less(j, knp.add(estimate, 2)))
        below = knp.less_equal(knp.take(edges, knp.minimum(j, bins)), xs)
        index = knp.add(index, knp.astype(knp.logical_and(valid, below), DType.i32))
    return (xs, index, low, high, bins), edges


def _edges_part(x, edges):
    """One dimension binned against given ``edges``: an element's bin is the number of edges
    at or below it, less one."""
    require(
        x.size * edges.shape[0] <= _MAX_PAIRS,
        f"histogram of {x.size} elements against {edges.shape[0]} edges (limit {_MAX_PAIRS} pairs)",
    )
    count = edges.shape[0] - 1
    flat = knp.reshape(x, (-1, 1))
    at_or_below = knp.sum(
        knp.astype(knp.less_equal(edges, flat), DType.i32), axis=-1, keepdims=False
    )
    return knp.reshape(x, (-1,)), knp.subtract(at_or_below, 1), edges[0], edges[count], count


def _density(hist, edges):
    """Counts divided by their total, then by the bin widths along each dimension (torch's
    order), so the histogram integrates to 1."""
    hist = knp.divide(hist, knp.sum(hist, keepdims=False))
    for dim, dim_edges in enumerate(edges):
        shape = [1] * len(edges)
        shape[dim] = -1
        widths = knp.subtract(dim_edges[1:], dim_edges[:-1])
        hist = knp.divide(hist, knp.reshape(widths, tuple(shape)))
    return hist


def _flat(weight):
    return None if weight is None else knp.reshape(weight, (-1,))


@RULES.register(aten.histogram.bin_ct)
def histogram(ctx, x, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
    dtype = ctx.out_dtype
    part, edges = _linear_part(knp.astype(x, compute_dtype(dtype)), bins, range, dtype)
    hist = _count([part], weight, dtype)
    return (_density(hist, [edges]) if density else hist), edges


@RULES.register(aten.histogram.bins_tensor)
def histogram_edges(ctx, x, bins, *, weight=None, density=False):
    hist = _count([_edges_part(x, bins)], _flat(weight), ctx.out_dtype)
    return (_density(hist, [bins]) if density else hist), bins


def _linear_parts(x, bins, limits):
    """Per column of ``x`` ``[..., D]``: its ``_count`` part and edges (``histogramdd``)."""
    dtype = knp.dtype_of(x)
    require(len(bins) == x.shape[-1], "histogramdd with a bin count for every dimension")
    xs = knp.reshape(knp.astype(x, compute_dtype(dtype)), (-1, x.shape[-1]))
    return [
        _linear_part(xs[:, d], n, None if limits is None else limits[2 * d : 2 * d + 2], dtype)
        for d, n in enumerate(bins)
    ]


@RULES.register(aten._histogramdd_bin_edges.default)
def histogramdd_bin_edges(ctx, x, bins, *, range=None, weight=None, density=False):  # noqa: A002
    return tuple(edges for _, edges in _linear_parts(x, bins, range))


@RULES.register(aten._histogramdd_from_bin_cts.default)
def histogramdd_from_bin_cts(ctx, x, bins, *, range=None, weight=None, density=False):  # noqa: A002
    parts = _linear_parts(x, bins, range)
    hist = _count([part for part, _ in parts], _flat(weight), knp.dtype_of(x))
    return _density(hist, [edges for _, edges in parts]) if density else hist


@RULES.register(aten._histogramdd_from_bin_tensors.default)
def histogramdd_from_bin_tensors(ctx, x, bins, *, weight=None, density=False):
    require(len(bins) == x.shape[-1], "histogramdd with edges for every dimension")
    columns = knp.reshape(x, (-1, x.shape[-1]))
    parts = [_edges_part(columns[:, d], edges) for d, edges in enumerate(bins)]
    hist = _count(parts, _flat(weight), knp.dtype_of(x))
    return _density(hist, bins) if density else hist
