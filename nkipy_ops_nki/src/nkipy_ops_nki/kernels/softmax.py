"""Softmax over the last axis of a [rows, cols] HBM tensor, as an NKI kernel.

Rows are tiled by 128 partitions (the last tile masked); each row is one partition, so the max
and the sum are free-axis reductions. Computed in fp32, stored in the input's dtype.
"""

from __future__ import annotations

import nkipy_ops_nki.nki.language as nl
from nkipy_ops_nki.interpreter.limits import SBUF_BYTES_PER_PARTITION
from nkipy_ops_nki.kernels._support import row_wise_support

LIVE_TILES = 3
"""fp32 [128, cols] tiles alive at once: the input, its exponentials, the result."""
MAX_COLS = SBUF_BYTES_PER_PARTITION // (4 * LIVE_TILES)


def supports(shape, dtype) -> str | None:
    """None when ``softmax_kernel`` handles an input of this shape and dtype, else why not."""
    return row_wise_support(shape, dtype, MAX_COLS)


def softmax_kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(nl.tile_size.pmax)[:, None]
    iy = nl.arange(cols)[None, :]
    for t in nl.affine_range((rows + nl.tile_size.pmax - 1) // nl.tile_size.pmax):
        row = t * nl.tile_size.pmax + ip
        tile = nl.load(x[row, iy], mask=(row < rows), dtype=nl.float32)
        shifted = nl.exp(tile - nl.max(tile, axis=1, keepdims=True))
        result = shifted * nl.reciprocal(nl.sum(shifted, axis=1, keepdims=True))
        nl.store(out[row, iy], value=result, mask=(row < rows))
    return out
