"""Sliding windows over the trailing (spatial) dims: the slicing behind convolution and pooling.

A window op over ``k`` kernel offsets reads, for each offset, one strided slice of the (padded)
input: ``window_slices`` returns those ``k`` slices, each shaped like the output. Its adjoint,
``place_windows``, adds ``k`` output-shaped pieces back at the positions they were read from;
it is how gradients and transposed convolutions are written. Strided placement is interleaving
with zeros (a reshape of ``[x, 0, …]``) and padding, so only slicing and padding are used.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from nkipy_core import knp


def output_size(
    size: int, kernel: int, stride: int, padding: int, dilation: int = 1, ceil_mode: bool = False
) -> int:
    """ATen's pooling/convolution output length; with ``ceil_mode`` the last window must start
    inside the input or its left padding."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def offsets(kernel: Sequence[int]) -> list[tuple[int, ...]]:
    """Kernel offsets in row-major order (the order of a flattened kernel)."""
    return list(itertools.product(*(range(k) for k in kernel)))


def window_slices(
    x, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int], out: Sequence[int]
) -> list:
    """For each kernel offset, ``x``'s trailing dims read at ``offset * dilation + stride * i``."""
    lead = (slice(None),) * (x.ndim - len(kernel))
    return [
        x[
            lead
            + tuple(
                slice(o * d, o * d + s * (n - 1) + 1, s)
                for o, d, s, n in zip(offset, dilation, stride, out)
            )
        ]
        for offset in offsets(kernel)
    ]


def interleave_zeros(x, axis: int, stride: int):
    """``x`` with ``stride - 1`` zeros between consecutive elements along ``axis``."""
    if stride == 1 or x.shape[axis] == 0:
        return x
    axis %= x.ndim
    zeros = knp.zeros((*x.shape[: axis + 1], stride - 1, *x.shape[axis + 1 :]), knp.dtype_of(x))
    spread = knp.concatenate([knp.expand_dims(x, axis + 1), zeros], axis=axis + 1)
    merged = knp.reshape(spread, (*x.shape[:axis], x.shape[axis] * stride, *x.shape[axis + 1 :]))
    return merged[(slice(None),) * axis + (slice(0, (x.shape[axis] - 1) * stride + 1),)]


def place_windows(
    pieces: Sequence,
    canvas: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
):
    """The adjoint of ``window_slices``: the sum over offsets of each piece put back where its
    slice was read, on zeros of trailing shape ``canvas``."""
    total = None
    for piece, offset in zip(pieces, offsets(kernel)):
        lead = piece.ndim - len(kernel)
        pad = [(0, 0)] * lead
        for axis, (o, d, s, c) in enumerate(zip(offset, dilation, stride, canvas)):
            piece = interleave_zeros(piece, lead + axis, s)
            pad.append((o * d, c - o * d - piece.shape[lead + axis]))
        placed = knp.pad(piece, pad)
        total = placed if total is None else knp.add(total, placed)
    return total


def im2col(
    x, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int], out: Sequence[int]
):
    """``(N, C, *spatial)`` to ``(N, C, prod(kernel), prod(out))`` columns of window values."""
    columns = knp.stack(window_slices(x, kernel, stride, dilation, out), axis=2)
    return knp.reshape(columns, (*x.shape[:2], math.prod(kernel), math.prod(out)))


def col2im(
    columns,
    canvas: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    out: Sequence[int],
):
    """The adjoint of ``im2col``: ``(N, C, prod(kernel), prod(out))`` back to ``(N, C, *canvas)``."""
    n, c = columns.shape[:2]
    pieces = [knp.reshape(columns[:, :, k], (n, c, *out)) for k in range(math.prod(kernel))]
    return place_windows(pieces, canvas, kernel, stride, dilation)
