"""Sorting: ``sort`` (stable or not), ``topk``, the order statistics ``kthvalue``,
``median`` and ``nanmedian``, and ``mode``, on the ``sort`` primitive.

The primitive sorts stably, descending by sorting the negated keys; negation is not an order
reversal for unsigned and bool tensors, so descending sorts of those are declined. Like NumPy,
the primitive places NaN last in both directions, where torch puts it first when descending.
"""

from __future__ import annotations

import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .conventions import require
from .rules import RULES

aten = torch.ops.aten


def _order(x, dim: int, descending: bool):
    dtype = knp.dtype_of(x)
    require(
        not descending or dtype not in (DType.bool, DType.u8),
        f"descending sort of {dtype.value} (negation does not reverse its order)",
    )
    return knp.argsort(x, dim, descending=descending)


@RULES.register(aten.sort.default, aten.sort.stable)
def sort(ctx, x, dim=-1, descending=False, *, stable=None):
    if x.ndim == 0:
        return x, knp.zeros((), torch.int64)
    order = _order(x, dim, descending)
    return knp.take_along_axis(x, order, dim), order


@RULES.register(aten.topk.default)
def topk(ctx, x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - ATen's argument name
    if x.ndim == 0:
        return x, knp.zeros((), torch.int64)
    dim %= x.ndim
    order = _order(x, dim, largest)[(slice(None),) * dim + (slice(0, k),)]
    return knp.take_along_axis(x, order, dim), order


# -- order statistics: kthvalue, median, nanmedian ------------------------------------------------


def _order_statistic(x, dim: int, keepdim: bool, position):
    """Value and index of the element at ``position`` (a static int, or an array with ``dim``
    kept at size 1) of ``x`` sorted ascending along ``dim``: NaN sorts last, ties keep their
    order (torch's kernels pick among equal values in an unspecified order)."""
    order = knp.argsort(x, dim)
    if isinstance(position, int):
        position = knp.full(x.shape[:dim] + (1,) + x.shape[dim + 1 :], position, DType.i64)
    index = knp.take_along_axis(order, position, dim)
    value = knp.take_along_axis(x, index, dim)
    if not keepdim:
        value, index = knp.squeeze(value, dim), knp.squeeze(index, dim)
    return value, index


def _median_position(x, dim: int, ignore_nan: bool):
    """The lower median's place in the sorted row: among the non-NaN values if ``ignore_nan``;
    otherwise the first NaN if the row has one (the median of a row with NaN is NaN)."""
    n = x.shape[dim]
    if not knp.dtype_of(x).is_float:
        return (n - 1) // 2
    nans = knp.sum(knp.astype(knp.isnan(x), DType.i64), dim, keepdims=True)
    if ignore_nan:
        return knp.maximum(knp.floor_divide(knp.subtract(n - 1, nans), 2), 0)
    return knp.where(knp.greater(nans, 0), knp.subtract(n, nans), (n - 1) // 2)


@RULES.register(aten.kthvalue.default)
def kthvalue(ctx, x, k, dim=-1, keepdim=False):
    if x.ndim == 0:
        return x, knp.zeros((), DType.i64)
    return _order_statistic(x, dim % x.ndim, keepdim, k - 1)


def _median(x, dim, keepdim, ignore_nan: bool):
    if x.ndim == 0:
        return x, knp.zeros((), DType.i64)
    dim %= x.ndim
    return _order_statistic(x, dim, keepdim, _median_position(x, dim, ignore_nan))


@RULES.register(aten.median.dim)
def median_dim(ctx, x, dim, keepdim=False):
    return _median(x, dim, keepdim, ignore_nan=False)


@RULES.register(aten.nanmedian.dim)
def nanmedian_dim(ctx, x, dim, keepdim=False):
    return _median(x, dim, keepdim, ignore_nan=True)


@RULES.register(aten.median.default)
def median(ctx, x):
    return _median(knp.reshape(x, (-1,)), 0, False, ignore_nan=False)[0]


@RULES.register(aten.nanmedian.default)
def nanmedian(ctx, x):
    return _median(knp.reshape(x, (-1,)), 0, False, ignore_nan=True)[0]


@RULES.register(aten.mode.default)
def mode(ctx, x, dim=-1, keepdim=False):
    """The most frequent value along ``dim`` (the smallest among equally frequent ones, as in
    torch) and the index of its last occurrence (torch gives the index of an occurrence that its
    unstable sort puts last: the same on short rows, any of them on longer ones). The row is
    sorted stably; at each sorted position the length of the run of equal values so far is the
    position less the run's start (a running maximum of the starts); the first position where
    that length is largest ends the winning run. NaNs count as equal to each other, as in
    torch."""
    if x.ndim == 0:
        return x, knp.zeros((), DType.i64)
    dim %= x.ndim
    order = knp.argsort(x, dim)
    ordered = knp.take_along_axis(x, order, dim)
    n = x.shape[dim]
    shape = [n if d == dim else 1 for d in range(x.ndim)]
    position = knp.reshape(knp.arange(n, DType.i64), shape)
    previous = ordered[(slice(None),) * dim + (slice(0, n - 1),)]
    current = ordered[(slice(None),) * dim + (slice(1, n),)]
    same = knp.equal(previous, current)
    if knp.dtype_of(x).is_float:
        same = knp.logical_or(same, knp.logical_and(knp.isnan(previous), knp.isnan(current)))
    first = knp.full(x.shape[:dim] + (1,) + x.shape[dim + 1 :], True, DType.bool)
    starts = knp.concatenate([first, knp.logical_not(same)], axis=dim)
    run_start = knp.cummax(knp.where(starts, position, 0), dim)
    end = knp.argmax(knp.subtract(position, run_start), dim, keepdims=True)
    value = knp.take_along_axis(ordered, end, dim)
    index = knp.take_along_axis(order, end, dim)
    if not keepdim:
        value, index = knp.squeeze(value, dim), knp.squeeze(index, dim)
    return value, knp.astype(index, DType.i64)
