"""Allocating tensors and moving data between HBM and SBUF (``nl.load`` / ``nl.store``)."""

from __future__ import annotations

import numpy as np

from nkipy_ops_nki.errors import NKIError
from nkipy_ops_nki.interpreter.context import current
from nkipy_ops_nki.interpreter.location import kernel_error, kernel_frame
from nkipy_ops_nki.interpreter.tiles import Access, Buffer, Tensor, sbuf


def par_dim(size: int) -> int:
    """``nl.par_dim(n)`` marks the partition dimension of a shape; here it is just ``n``."""
    return size


def ndarray(shape, dtype, buffer: Buffer = sbuf) -> Tensor:
    """A new tensor. In HBM it is a launch output: every program of the launch gets the same
    one for the same call site, so programs that each store a part of it fill one array."""
    shape = tuple(int(d) for d in shape)
    if buffer.on_chip:
        return Tensor(np.zeros(shape, dtype), buffer)
    program = current.get()
    if program is None:
        return Tensor(np.zeros(shape, dtype), buffer)
    return Tensor(program.hbm_array(shape, dtype, kernel_frame()[:2]), buffer)


def full(shape, fill_value, dtype, buffer: Buffer = sbuf) -> Tensor:
    tensor = ndarray(shape, dtype, buffer)
    tensor.data[...] = fill_value
    return tensor


def zeros(shape, dtype, buffer: Buffer = sbuf) -> Tensor:
    return full(shape, 0, dtype, buffer)


def ones(shape, dtype, buffer: Buffer = sbuf) -> Tensor:
    return full(shape, 1, dtype, buffer)


def zeros_like(like, dtype=None, buffer: Buffer = sbuf) -> Tensor:
    return zeros(like.shape, dtype or like.dtype, buffer)


def broadcast_to(tile: Tensor, shape) -> Tensor:
    """``nl.broadcast_to``: the tile repeated along its size-1 dimensions."""
    return tile.broadcast_to(shape)


def _hbm_access(target, what: str) -> Access:
    if isinstance(target, Tensor):
        target = Access(target, ...)
    if not isinstance(target, Access) or target.tensor.buffer.on_chip:
        raise kernel_error(
            NKIError, f"{what} takes an HBM tensor (or a subscript of one), got {target!r}"
        )
    return target


def load(src, mask=None, dtype=None) -> Tensor:
    """Copy ``src`` (an HBM tensor or subscript) into a new SBUF tile; masked-out elements are
    not read and are 0 in the tile."""
    access = _hbm_access(src, "nl.load")
    data = access.read(mask)
    return Tensor(data.astype(dtype) if dtype is not None else data.copy(), sbuf)


def store(dst, value, mask=None) -> None:
    """Write the tile ``value`` into ``dst`` (an HBM tensor or subscript), cast to its dtype;
    masked-out elements are left untouched."""
    _hbm_access(dst, "nl.store").write(value, mask)
