"""Element types and tensor types of the NKIPy IR.

The IR names its own dtypes (``f32``, ``bf16`` …) instead of borrowing torch's or NumPy's so that a
kernel is a self-contained value; these helpers translate at the edges.

The IR has no complex types, as Trainium has none: a complex tensor (``complex64``,
``complex128``) is carried by its real view, ``torch.view_as_real``'s ``[..., 2]`` array of its
real and imaginary parts (``value_type``, ``torch_to_numpy``). Kernels, runtimes and emitted HLO
only ever see those real arrays.
"""

from __future__ import annotations

import builtins
import enum
import math
from collections.abc import Iterable

import attrs
import ml_dtypes
import numpy as np
import torch

# inside DType, ``bool`` is a member and ``torch`` a property: its annotations use
# ``builtins.bool`` and this alias
_TorchDType = torch.dtype


class DType(enum.Enum):
    """An element type; the value is the short name used in IR text."""

    bool = "pred"
    i8 = "i8"
    i16 = "i16"
    i32 = "i32"
    i64 = "i64"
    u8 = "u8"
    u32 = "u32"  # random bits and the random-number generator state (Philox words)
    u64 = "u64"  # pairs of random words (randperm keys, f64 uniforms, wide randint ranges)
    f16 = "f16"
    bf16 = "bf16"
    f32 = "f32"
    f64 = "f64"

    # set below on each member: the NumPy and torch dtypes, read on every kernel call
    _numpy: np.dtype
    _torch: _TorchDType

    @property
    def is_float(self) -> builtins.bool:
        return self in _FLOATS

    @property
    def is_integer(self) -> builtins.bool:
        return self in _INTEGERS

    @property
    def is_half(self) -> builtins.bool:
        """16-bit floats: the cpu runtime computes them in f32 and rounds each result, like torch."""
        return self in (DType.f16, DType.bf16)

    def scalar(self, value: builtins.bool | int | float) -> np.ndarray:
        """A Python number as a 0-d array of this type, rounded as torch converts a ``Scalar``:
        half floats are constructed from an f32 (``c10::Half(float)``), so a double is rounded
        to f32 first. The direct cast can differ: ``1 + 2**-11 + 2**-40`` is 1.0 in torch's f16,
        1.001 in NumPy's. An integer out of an integer type's range wraps around, as C's
        conversion does (``-1`` is 255 in u8), where NumPy would raise."""
        with np.errstate(over="ignore"):  # too large for the type is infinity, as in torch
            if self.is_half:
                return np.asarray(np.float32(value), dtype=self.numpy)
            if self.is_integer and isinstance(value, int):
                return np.asarray(value % 2**64, dtype=np.uint64).astype(self.numpy)
            return np.asarray(value, dtype=self.numpy)

    @property
    def numpy(self) -> np.dtype:
        return self._numpy

    @property
    def numpy_name(self) -> str:
        """How generated NumPy source spells the type (``np.float32``, ``bfloat16``)."""
        return _NUMPY_NAMES[self]

    @property
    def torch(self) -> _TorchDType:
        return self._torch

    @classmethod
    def from_torch(cls, dtype: _TorchDType) -> DType:
        try:
            return _FROM_TORCH[dtype]
        except KeyError:
            raise TypeError(f"torch dtype {dtype} has no NKIPy equivalent") from None

    @classmethod
    def from_numpy(cls, dtype: np.dtype | type) -> DType:
        try:
            return _FROM_NUMPY[np.dtype(dtype)]
        except KeyError:
            raise TypeError(f"NumPy dtype {np.dtype(dtype)} has no NKIPy equivalent") from None

    def __repr__(self) -> str:
        return self.value


_FLOATS = frozenset({DType.f16, DType.bf16, DType.f32, DType.f64})
_INTEGERS = frozenset({DType.i8, DType.i16, DType.i32, DType.i64, DType.u8, DType.u32, DType.u64})

_TO_NUMPY = {
    DType.bool: np.dtype(np.bool_),
    DType.i8: np.dtype(np.int8),
    DType.i16: np.dtype(np.int16),
    DType.i32: np.dtype(np.int32),
    DType.i64: np.dtype(np.int64),
    DType.u8: np.dtype(np.uint8),
    DType.u32: np.dtype(np.uint32),
    DType.u64: np.dtype(np.uint64),
    DType.f16: np.dtype(np.float16),
    DType.bf16: np.dtype(ml_dtypes.bfloat16),
    DType.f32: np.dtype(np.float32),
    DType.f64: np.dtype(np.float64),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}
_NUMPY_NAMES = {d: ("bfloat16" if d is DType.bf16 else f"np.{_TO_NUMPY[d].name}") for d in DType}
_NUMPY_NAMES[DType.bool] = "np.bool_"
_TO_TORCH = {
    DType.bool: torch.bool,
    DType.i8: torch.int8,
    DType.i16: torch.int16,
    DType.i32: torch.int32,
    DType.i64: torch.int64,
    DType.u8: torch.uint8,
    DType.u32: torch.uint32,
    DType.u64: torch.uint64,
    DType.f16: torch.float16,
    DType.bf16: torch.bfloat16,
    DType.f32: torch.float32,
    DType.f64: torch.float64,
}
_FROM_TORCH = {v: k for k, v in _TO_TORCH.items()}
# on each member too: every kernel call reads them, and a dict keyed by an Enum hashes it in Python
for _member in DType:
    _member._numpy, _member._torch = _TO_NUMPY[_member], _TO_TORCH[_member]


#: the element type of the real view of each complex dtype the IR carries (``complex32`` has no
#: NumPy equivalent to compute with, so it is not carried)
_COMPLEX_PARTS = {torch.complex64: DType.f32, torch.complex128: DType.f64}


def as_dims(values: Iterable[int]) -> tuple[int, ...]:
    """A shape or strides as a tuple: the converter of shape fields (a typed ``tuple``)."""
    return tuple(values)


@attrs.frozen
class TensorType:
    """Static shape and element type of an IR value."""

    shape: tuple[int, ...] = attrs.field(converter=as_dims)
    dtype: DType

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        return f"{self.dtype.value}[{dims}]"


def value_type(shape: Iterable[int], dtype: _TorchDType) -> TensorType:
    """The IR type that holds a torch tensor of this shape and dtype: its own, or for a complex
    dtype its real view's (``complex64[4]`` is ``f32[4x2]``). ``TypeError`` for a dtype the IR
    cannot hold."""
    part = _COMPLEX_PARTS.get(dtype)
    if part is not None:
        return TensorType((*shape, 2), part)
    return TensorType(tuple(shape), DType.from_torch(dtype))


def torch_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor, bf16 included (torch cannot export bf16 to NumPy itself);
    of a complex tensor, its real view (``value_type``); a copy where torch's conjugate or
    negative bit says the values are not the memory's.

    Called on every kernel input of a CPU graph, so it detaches only a tensor that needs it
    (``detach`` costs as much as ``numpy`` itself)."""
    if t.requires_grad:
        t = t.detach()
    if t.is_neg():
        t = t.resolve_neg()
    if t.dtype is torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if t.is_complex():
        return torch.view_as_real(t.resolve_conj()).numpy()
    return t.numpy()


def numpy_to_torch(a: np.ndarray) -> torch.Tensor:
    """A CPU tensor sharing memory with ``a`` where torch allows it, bf16 included."""
    if type(a) is not np.ndarray:
        a = np.asarray(a)
    flags = a.flags
    # torch.from_numpy needs writable memory and non-negative strides (C-contiguous has them)
    if not flags.writeable or (not flags.c_contiguous and any(s < 0 for s in a.strides)):
        a = a.copy()
    if a.dtype == _BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


_BF16 = np.dtype(ml_dtypes.bfloat16)
