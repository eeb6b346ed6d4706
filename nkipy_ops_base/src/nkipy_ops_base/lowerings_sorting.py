"""Sorting: ``sort`` (stable or not) and ``topk``, on the ``sort`` primitive.

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
    require(not descending or dtype not in (DType.bool, DType.u8),
            f"descending sort of {dtype.value} (negation does not reverse its order)")
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
