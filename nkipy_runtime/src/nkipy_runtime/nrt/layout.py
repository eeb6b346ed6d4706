"""Where a strided ``DeviceArray`` lies inside its NRT tensor, in bytes.

libnrt moves bytes only as (tensor, byte offset, size) ranges: nrt_tensor_read, nrt_tensor_write
and nrt_tensor_copy have no strides. A view therefore is either one contiguous range, or a span
that covers it (read whole, scattered into on the host), or a series of contiguous runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import attrs
import numpy as np

from nkipy_core.runtime import DeviceArray


def itemsize(array: DeviceArray) -> int:
    return array.dtype.numpy.itemsize


def is_contiguous(array: DeviceArray) -> bool:
    """Row-major with no gaps (dimensions of size 1 may have any stride, as in torch)."""
    expected = 1
    for size, stride in zip(reversed(array.shape), reversed(array.strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def span(array: DeviceArray) -> tuple[int, int]:
    """(first element, element count) of the smallest range of the buffer holding the view."""
    if math.prod(array.shape) == 0:
        return array.offset, 0
    return array.offset, 1 + sum(
        (size - 1) * stride for size, stride in zip(array.shape, array.strides)
    )


def view_in_span(staging: np.ndarray, array: DeviceArray) -> np.ndarray:
    """The view ``array`` as a NumPy array over ``staging``, a host copy of its span."""
    step = staging.itemsize
    return np.lib.stride_tricks.as_strided(
        staging, array.shape, tuple(s * step for s in array.strides), writeable=True
    )


@attrs.frozen
class Runs:
    """A copy between two views of one shape as contiguous runs of ``nbytes`` each."""

    nbytes: int
    outer: tuple[
        tuple[int, int, int], ...
    ]  # (size, src stride, dst stride) of the other dimensions
    src_offset: int  # elements
    dst_offset: int
    step: int  # bytes per element

    @property
    def count(self) -> int:
        return math.prod(n for n, _, _ in self.outer)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """(src, dst) byte offsets of each run."""
        for index in np.ndindex(*(n for n, _, _ in self.outer)):
            s = self.src_offset + sum(i * st for i, (_, st, _) in zip(index, self.outer))
            d = self.dst_offset + sum(i * dt for i, (_, _, dt) in zip(index, self.outer))
            yield s * self.step, d * self.step


def common_runs(src: DeviceArray, dst: DeviceArray) -> Runs:
    """A run is the longest innermost block that is row-major in both arrays; there are as many
    runs as the product of the remaining dimensions (one for two contiguous arrays)."""
    dims = [(n, s, d) for n, s, d in zip(src.shape, src.strides, dst.strides) if n != 1]
    run = 1
    while dims and dims[-1][1] == run and dims[-1][2] == run:
        run *= dims.pop()[0]
    step = itemsize(src)
    return Runs(run * step, tuple(dims), src.offset, dst.offset, step)
