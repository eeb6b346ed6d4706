"""``segment_reduce`` and its backward: reductions over consecutive segments of one axis whose
lengths (or offsets) are data.

The result's shape is static (one row per segment), the segments are not: each is a mask over
the axis, ``start <= position < end`` with the ends a cumulative sum of the lengths, so the
kernel is right for any lengths of its shapes. Reducing the masked ``[..., S, N, ...]`` costs
``S`` times the input (declined past 2**26 elements). ``initial`` takes part as one more
element of every segment, as in torch: ``mean`` is ``(sum + initial) / length``, and an empty
segment gives ``initial``, or without it the reduction's identity (``mean``: NaN).

Gradients: ``sum`` and ``mean`` spread the segment's gradient (``mean`` divided by the length);
``max``/``min`` split it evenly among the elements equal to the result; ``prod`` gives each
element the product of the rest of its segment (``initial`` included), written as
``result / x`` where ``x`` is not zero, the product of the nonzero rest for a segment's only
zero, and 0 where the segment has another zero.
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

_MAX_ELEMENTS = 2**26
_IDENTITY = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}


class _Segments:
    """Segment membership along ``axis`` of ``data``: lengths/offsets have shape
    ``data.shape[:axis] + (S,)`` (``S + 1`` offsets)."""

    def __init__(self, data, axis: int, lengths, offsets):
        require(lengths is not None or offsets is not None, "segment_reduce by indices")
        self.axis = axis % data.ndim
        if offsets is not None:
            count = offsets.shape[-1] - 1
            starts, ends = offsets[..., :count], offsets[..., 1:]
        else:
            ends = knp.cumsum(lengths, -1)
            starts = knp.subtract(ends, lengths)
        self.count = starts.shape[-1]
        self.size = data.shape[self.axis]
        require(
            self.count * data.size <= _MAX_ELEMENTS,
            f"segment_reduce of {data.size} elements in {self.count} segments "
            f"(limit {_MAX_ELEMENTS} masked elements)",
        )
        trailing = data.ndim - self.axis - 1
        position = knp.arange(self.size, knp.dtype_of(ends))
        # [..., S, N] then one 1 per trailing dim of data
        starts, ends = (knp.expand_dims(v, -1) for v in (starts, ends))
        mask = knp.logical_and(knp.greater_equal(position, starts), knp.less(position, ends))
        self.mask = knp.reshape(mask, (*mask.shape, *(1,) * trailing))
        self.lengths = knp.reshape(knp.subtract(ends, starts), (*ends.shape[:-1], *(1,) * trailing))

    def spread(self, data):
        """``data`` as ``[..., 1, N, ...]``: broadcast against the mask."""
        return knp.expand_dims(data, self.axis)

    def masked(self, data, fill):
        return knp.where(self.mask, self.spread(data), fill)

    def reduce(self, data, kind: str):
        axis = self.axis + 1
        if kind == "max":
            return knp.max(self.masked(data, -math.inf), axis)
        if kind == "min":
            return knp.min(self.masked(data, math.inf), axis)
        if kind == "prod":
            return knp.prod(self.masked(data, 1), axis)
        return knp.sum(self.masked(data, 0), axis)

    def per_element(self, per_segment):
        """The value of each element's segment, ``[..., N, ...]`` (0 outside every segment)."""
        return knp.sum(
            knp.where(self.mask, knp.expand_dims(per_segment, self.axis + 1), 0), self.axis
        )


def _reduce(segments, data, kind: str, initial):
    """The reduction of every segment, ``initial`` taking part (see the module)."""
    total = segments.reduce(data, kind)
    empty = knp.equal(segments.lengths, 0)
    if kind == "mean":
        total = knp.divide(knp.add(total, initial or 0), segments.lengths)
        return knp.where(empty, math.nan if initial is None else initial, total)
    if initial is None:
        return total
    if kind == "sum":
        return knp.add(total, initial)
    if kind == "prod":
        return knp.multiply(total, initial)
    return (knp.maximum if kind == "max" else knp.minimum)(total, initial)


@RULES.register(aten.segment_reduce.default)
def segment_reduce(
    ctx, data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False,
    initial=None,
):  # fmt: skip
    dtype = ctx.out_dtype
    segments = _Segments(data, axis, lengths, offsets)
    values = knp.astype(data, compute_dtype(dtype))
    return knp.astype(_reduce(segments, values, reduce, initial), dtype)


@RULES.register(aten._segment_reduce_backward.default)
def segment_reduce_backward(
    ctx, grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None
):
    dtype = ctx.out_dtype
    compute = compute_dtype(dtype)
    segments = _Segments(data, axis, lengths, offsets)
    x, g, out = (knp.astype(v, compute) for v in (data, grad, output))
    g_each = segments.per_element(g)
    if reduce == "sum":
        result = g_each
    elif reduce == "mean":
        lengths = knp.astype(knp.maximum(segments.lengths, 1), compute)
        result = segments.per_element(knp.divide(g, lengths))
    elif reduce in ("max", "min"):
        out_each = segments.per_element(out)
        equal = knp.equal(segments.spread(x), knp.expand_dims(out, segments.axis + 1))
        hit = knp.where(segments.mask, knp.astype(equal, compute), 0)
        ties = knp.sum(hit, segments.axis + 1)
        share = segments.per_element(knp.divide(g, knp.maximum(ties, 1)))
        result = knp.where(knp.equal(x, out_each), share, 0)
    else:
        zero = knp.equal(x, 0)
        zeros = knp.sum(knp.astype(segments.masked(zero, False), DType.i32), segments.axis + 1)
        rest = segments.reduce(knp.where(zero, knp.ones((), compute), x), "prod")
        rest = rest if initial is None else knp.multiply(rest, initial)
        nonzero = knp.divide(knp.multiply(g_each, segments.per_element(out)), knp.where(zero, 1, x))
        only_zero = knp.multiply(g_each, segments.per_element(rest))
        zeros_each = segments.per_element(zeros)
        result = knp.where(
            zero,
            knp.where(knp.equal(zeros_each, 1), only_zero, 0),
            knp.where(knp.equal(zeros_each, 0), nonzero, 0),
        )
    return knp.astype(result, dtype)
