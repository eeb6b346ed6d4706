"""Building kernels by tracing: ``KernelBuilder`` records ops, ``Traced`` stands for a value.

Lowering rules never see this module directly; they call ``knp`` functions, which apply
primitives either to ``Traced`` values (recording an op) or to NumPy arrays (evaluating it).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from nkipy_core.errors import VerificationError
from nkipy_core.ir.codegen import evaluate
from nkipy_core.ir.graph import ConstantData, Kernel, Op, Value
from nkipy_core.ir.primitives import infer, primitive
from nkipy_core.ir.types import DType, TensorType

#: the builder whose kernel is being traced; sources such as ``knp.arange`` record into it
_ACTIVE: contextvars.ContextVar[KernelBuilder | None] = contextvars.ContextVar(
    "nkipy_builder", default=None
)


def active_builder() -> KernelBuilder | None:
    return _ACTIVE.get()


class KernelBuilder:
    """Accumulates ops in program order; ``origin`` labels what they were built for."""

    def __init__(self, name: str):
        self.name = name
        self._ids = itertools.count()
        self._params: list[Value] = []
        self._ops: list[Op] = []
        self.origin = ""

    def param(self, type_: TensorType) -> Traced:
        value = Value(next(self._ids), type_)
        self._params.append(value)
        return Traced(self, value)

    @contextlib.contextmanager
    def building(self, origin: str) -> Iterator[None]:
        previous, self.origin = self.origin, origin
        token = _ACTIVE.set(self)
        try:
            yield
        finally:
            _ACTIVE.reset(token)
            self.origin = previous

    def emit(self, prim: str, operands: Sequence[Traced], params: dict[str, Any]) -> Traced:
        types = [o.value.type for o in operands]
        try:
            result_type = infer(prim, types, params)
        except TypeError as exc:
            where = f" while lowering {self.origin}" if self.origin else ""
            raise VerificationError(f"ill-typed {prim}{where}: {exc}") from None
        value = Value(next(self._ids), result_type)
        self._ops.append(Op(prim, [o.value for o in operands], params, value, self.origin))
        return Traced(self, value)

    def primitives(self) -> set[str]:
        """The primitives of the ops built so far."""
        return {op.prim for op in self._ops}

    def custom_call_targets(self) -> set[str]:
        """The targets of the custom calls built so far."""
        return {op.params["target"] for op in self._ops if op.prim == "custom_call"}

    def finish(self, outputs: Sequence[Traced]) -> Kernel:
        return Kernel(self.name, self._params, self._ops, [o.value for o in outputs])


class Traced:
    """A symbolic tensor inside a ``KernelBuilder``; arithmetic operators build ops via ``knp``."""

    __slots__ = ("builder", "value")
    __array_priority__ = 1000  # make NumPy defer `ndarray + Traced` to Traced.__radd__

    def __init__(self, builder: KernelBuilder, value: Value):
        self.builder = builder
        self.value = value

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.value.type.dtype.numpy

    @property
    def ndim(self) -> int:
        return self.value.type.rank

    @property
    def size(self) -> int:
        return self.value.type.size

    def __repr__(self) -> str:
        return f"Traced(%{self.value.name}: {self.value.type})"

    def __len__(self) -> int:
        return self.shape[0]

    def __bool__(self) -> bool:
        raise TypeError(
            "a traced tensor has no concrete value: use knp.where(...) instead of Python `if`/`and`"
        )

    # Operators are wired up in knp.py, next to the functions they call.


def constant(builder: KernelBuilder, array: np.ndarray, dtype: DType) -> Traced:
    return builder.emit("constant", [], {"value": ConstantData.from_array(array, dtype)})


def apply(
    prim: str, operands: Sequence[Traced | np.ndarray], params: dict[str, Any]
) -> Traced | np.ndarray:
    """Apply a primitive: record it if any operand is traced, else evaluate it with NumPy.

    Sources (no operands) and primitives that must not fold (collectives, custom calls) are
    recorded into the kernel being built even when their operands are all NumPy arrays."""
    builder = next((o.builder for o in operands if isinstance(o, Traced)), None)
    if builder is None and (not operands or not primitive(prim).folds):
        builder = active_builder()
    if builder is not None:
        traced = [
            o if isinstance(o, Traced) else constant(builder, o, DType.from_numpy(o.dtype))
            for o in operands
        ]
        return builder.emit(prim, traced, params)
    arrays = [np.asarray(o) for o in operands]
    types = [TensorType(a.shape, DType.from_numpy(a.dtype)) for a in arrays]
    try:
        result_type = infer(prim, types, params)
    except TypeError as exc:
        raise VerificationError(f"ill-typed {prim}: {exc}") from None
    return evaluate(prim, arrays, params, result_type)
