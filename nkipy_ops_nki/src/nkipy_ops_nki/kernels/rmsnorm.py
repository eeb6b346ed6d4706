"""RMS normalisation of the rows of a [rows, cols] HBM tensor with a [cols] weight, as an NKI kernel.

y = x * rsqrt(mean(x * x, axis=-1) + eps) * w, in fp32, stored in x's dtype. Rows are tiled by
128 partitions (the last tile masked); the weight is loaded once as one row and broadcast to
every partition.
"""

from __future__ import annotations

import nkipy_ops_nki.nki.language as nl
from nkipy_ops_nki.interpreter.limits import SBUF_BYTES_PER_PARTITION
from nkipy_ops_nki.kernels._support import row_wise_support

LIVE_TILES = 4
"""fp32 [128, cols] tiles alive at once: the weight, the input, its squares, the result."""
MAX_COLS = SBUF_BYTES_PER_PARTITION // (4 * LIVE_TILES)


def supports(shape, dtype) -> str | None:
    """None when ``rmsnorm_kernel`` handles an input of this shape and dtype, else why not."""
    return row_wise_support(shape, dtype, MAX_COLS)


def rmsnorm_kernel(x, w, eps=1e-6):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(nl.tile_size.pmax)[:, None]
    iy = nl.arange(cols)[None, :]
    weight = nl.load(w.reshape((1, cols)), dtype=nl.float32).broadcast_to((nl.tile_size.pmax, cols))
    for t in nl.affine_range((rows + nl.tile_size.pmax - 1) // nl.tile_size.pmax):
        row = t * nl.tile_size.pmax + ip
        tile = nl.load(x[row, iy], mask=(row < rows), dtype=nl.float32)
        scale = nl.rsqrt(nl.mean(nl.square(tile), axis=1, keepdims=True) + eps)
        nl.store(out[row, iy], value=tile * scale * weight, mask=(row < rows))
    return out
