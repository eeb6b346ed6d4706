"""The NKIPy IR data model: SSA values, ops and kernels, all frozen.

A kernel is a straight-line SSA program over tensors with static shapes. Each op applies one
primitive (see ``primitives.py``) to earlier values and produces exactly one value; multi-result
computations (e.g. top-k values and indices) are separate ops, which keeps every pass trivial.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import numpy as np

from nkipy_core.ir.types import DType, TensorType, as_dims


@attrs.frozen
class Value:
    """An SSA value: a unique id within its kernel and a static type."""

    id: int
    type: TensorType

    @property
    def name(self) -> str:
        return f"v{self.id}"


@attrs.frozen(eq=False)
class ConstantData:
    """An immutable array literal, hashable by content so that CSE and cache keys see through it."""

    data: bytes
    dtype: DType
    shape: tuple[int, ...] = attrs.field(converter=as_dims)

    @classmethod
    def from_array(cls, array: np.ndarray, dtype: DType) -> ConstantData:
        # not np.ascontiguousarray: it turns a 0-d array into shape (1,)
        arr = np.asarray(array).astype(dtype.numpy, order="C")
        return cls(arr.tobytes(), dtype, arr.shape)

    @property
    def array(self) -> np.ndarray:
        arr = np.frombuffer(self.data, dtype=self.dtype.numpy).reshape(self.shape)
        arr.flags.writeable = False
        return arr

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()[:16]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConstantData) and (self.dtype, self.shape, self.data) == (
            other.dtype,
            other.shape,
            other.data,
        )

    def __hash__(self) -> int:
        return hash((self.dtype, self.shape, self.data))

    def __repr__(self) -> str:
        if len(self.data) <= 64:
            return np.array2string(self.array, separator=", ").replace("\n", "")
        return f"<{self.dtype.value}{list(self.shape)} sha256:{self.digest}>"

    def b64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")


@attrs.frozen(repr=False)
class Opaque:
    """A long string attribute the IR carries but does not read (a custom call's backend config).

    Compared and hashed by content, so CSE and cache keys see a change; printed as its length and
    digest, so ``kernel.ir`` stays readable when the text is a whole kernel's source."""

    text: str

    def __repr__(self) -> str:
        digest = hashlib.sha256(self.text.encode()).hexdigest()[:16]
        return f"<{len(self.text)} chars sha256:{digest}>"


def _values(values: Iterable[Value]) -> tuple[Value, ...]:
    return tuple(values)


def _ops(ops: Iterable[Op]) -> tuple[Op, ...]:
    return tuple(ops)


def _freeze_attrs(value: Mapping[str, Any] | tuple) -> tuple[tuple[str, Any], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted(items))


@attrs.frozen
class Op:
    """``result = prim(*operands, **attrs)``; ``origin`` says which ATen op and rule built it."""

    prim: str
    operands: tuple[Value, ...] = attrs.field(converter=_values)
    attributes: tuple[tuple[str, Any], ...] = attrs.field(converter=_freeze_attrs)
    result: Value
    origin: str = attrs.field(default="", eq=False)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.attributes)


@attrs.frozen
class Kernel:
    """A compiled unit: parameters in, outputs out, ops in between in program order."""

    name: str
    params: tuple[Value, ...] = attrs.field(converter=_values)
    ops: tuple[Op, ...] = attrs.field(converter=_ops)
    outputs: tuple[Value, ...] = attrs.field(converter=_values)

    @property
    def input_types(self) -> tuple[TensorType, ...]:
        return tuple(p.type for p in self.params)

    @property
    def output_types(self) -> tuple[TensorType, ...]:
        return tuple(o.type for o in self.outputs)
