"""Tensors in HBM, SBUF and PSUM, views of them through an index, and the one function every
compute op goes through.

A ``Tensor`` is a NumPy array plus the buffer it lives in. HBM tensors are only loaded from and
stored to; on-chip tiles (SBUF, PSUM) are what compute ops take, and are checked against the
hardware limits when created. Indexing either gives an ``Access``: the element coordinates a
load, store or tile read/write touches, bounds-checked when used (so that a mask can make it legal).
"""

from __future__ import annotations

import operator

import attrs
import numpy as np

from nkipy_ops_nki.errors import NKIError
from nkipy_ops_nki.interpreter import dtypes
from nkipy_ops_nki.interpreter.indexing import Index, Mask, check_bounds, coordinates, mask_values
from nkipy_ops_nki.interpreter.limits import check_tile
from nkipy_ops_nki.interpreter.location import kernel_error


@attrs.frozen
class Buffer:
    """A memory: ``nl.shared_hbm`` (device memory) or on chip, ``nl.sbuf`` / ``nl.psum``."""

    name: str
    on_chip: bool

    def __repr__(self) -> str:
        return f"nl.{self.name}"


shared_hbm = Buffer("shared_hbm", on_chip=False)
sbuf = Buffer("sbuf", on_chip=True)
psum = Buffer("psum", on_chip=True)


def _binary(op, reflected=False):
    def method(self, other):
        return apply(op, other, self) if reflected else apply(op, self, other)

    return method


class Operand:
    """Python operators on tiles and tile views: elementwise ops in fp32, like ``nl.add``."""

    __add__, __radd__ = _binary(operator.add), _binary(operator.add, True)
    __sub__, __rsub__ = _binary(operator.sub), _binary(operator.sub, True)
    __mul__, __rmul__ = _binary(operator.mul), _binary(operator.mul, True)
    __truediv__, __rtruediv__ = _binary(operator.truediv), _binary(operator.truediv, True)
    __pow__, __rpow__ = _binary(operator.pow), _binary(operator.pow, True)
    __lt__, __le__ = _binary(operator.lt), _binary(operator.le)
    __gt__, __ge__ = _binary(operator.gt), _binary(operator.ge)
    __eq__, __ne__ = _binary(operator.eq), _binary(operator.ne)  # type: ignore[assignment]
    __and__, __or__ = _binary(np.logical_and), _binary(np.logical_or)
    __hash__ = None  # type: ignore[assignment]

    def __neg__(self):
        return apply(operator.neg, self)


class Tensor(Operand):
    """An array in one buffer: a kernel argument or output (HBM) or a tile (SBUF/PSUM)."""

    def __init__(self, data: np.ndarray, buffer: Buffer):
        if buffer.on_chip:
            check_tile(data.shape, data.dtype, buffer.name)
        self.data, self.buffer = data, buffer

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def __getitem__(self, index) -> Access:
        return Access(self, index)

    def __setitem__(self, index, value) -> None:
        Access(self, index).write(value)

    def __iadd__(self, other) -> Tensor:
        """``acc += nl.matmul(...)``: accumulate in place (how PSUM tiles sum partial products)."""
        self.data[...] = apply(operator.add, self, other, dtype=self.dtype).data
        return self

    def reshape(self, shape: tuple[int, ...]) -> Tensor:
        """A view of an HBM tensor with another shape (e.g. a 1-D weight as one row)."""
        if self.buffer.on_chip:
            raise kernel_error(NKIError, "reshape applies to HBM tensors; reshape before nl.load")
        return Tensor(self.data.reshape(shape), self.buffer)

    def broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        """A tile repeated along its size-1 dimensions (e.g. one row copied to every partition)."""
        return Tensor(np.broadcast_to(values(self), shape).copy(), self.buffer)

    def __repr__(self) -> str:
        return f"Tensor({self.buffer!r}, shape={self.shape}, dtype={self.dtype.name})"


class Access(Operand):
    """``tensor[index]``: the coordinates it touches, with the tile shape they form."""

    def __init__(self, tensor: Tensor, index):
        self.tensor = tensor
        self.coords = coordinates(index, tensor.shape)
        self.shape = self.coords[0].shape if self.coords else ()

    @property
    def dtype(self) -> np.dtype:
        return self.tensor.dtype

    def _mask(self, mask) -> np.ndarray | None:
        if mask is None:
            return None
        try:
            return np.broadcast_to(mask_values(mask), self.shape)
        except ValueError:
            shape = np.shape(mask_values(mask))
            message = f"a mask of shape {shape} does not fit the tile shape {self.shape}"
            raise kernel_error(NKIError, message) from None

    def read(self, mask=None) -> np.ndarray:
        """The elements, zero where the mask is off (those are never read)."""
        live = self._mask(mask)
        check_bounds(self.coords, self.tensor.shape, live)
        if live is None:
            return self.tensor.data[tuple(self.coords)]
        out = np.zeros(self.shape, self.dtype)
        out[live] = self.tensor.data[tuple(c[live] for c in self.coords)]
        return out

    def write(self, value, mask=None) -> None:
        """Store ``value`` (cast to the tensor's dtype) where the mask is on."""
        live = self._mask(mask)
        check_bounds(self.coords, self.tensor.shape, live)
        array = np.asarray(values(value), dtype=np.float32)
        try:
            array = np.broadcast_to(array, self.shape).astype(self.dtype)
        except ValueError:
            raise kernel_error(
                NKIError,
                f"a value of shape {array.shape} cannot be written to a tile of shape {self.shape}",
            ) from None
        if live is None:
            self.tensor.data[tuple(self.coords)] = array
        else:
            self.tensor.data[tuple(c[live] for c in self.coords)] = array[live]


def values(x) -> np.ndarray:
    """The array behind a compute-op operand; HBM tensors must be loaded first."""
    if isinstance(x, (Tensor, Access)):
        tensor = x if isinstance(x, Tensor) else x.tensor
        if not tensor.buffer.on_chip:
            raise kernel_error(
                NKIError,
                "compute ops take on-chip tiles, not HBM tensors: nl.load the tensor first",
            )
        return x.data if isinstance(x, Tensor) else x.read()
    if isinstance(x, (Index, Mask)):
        return x.array
    return np.asarray(x)


def apply(fn, *operands, dtype=None, mask=None) -> Tensor:
    """Compute ``fn`` over the operands in fp32, zero outside ``mask``, cast to ``dtype`` (default:
    the promoted dtype of the tile operands) into a new tile."""
    arrays = [values(x).astype(np.float32) for x in operands]
    with np.errstate(
        all="ignore"
    ):  # like the engines: padding lanes of partial tiles may give inf/nan
        result = np.asarray(fn(*arrays))
    if mask is not None:
        result = np.where(mask_values(mask), result, 0)
    if dtype is None:
        dtype = dtypes.promote([x.dtype for x in operands if isinstance(x, (Tensor, Access))])
    return Tensor(result.astype(dtype), sbuf)
