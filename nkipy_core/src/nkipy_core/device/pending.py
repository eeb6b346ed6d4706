"""The eager ops queued on the device and not yet run: the pending graph.

A queued op computes nothing. It appends a record (the op, its arguments with tensors replaced
by references to earlier values) and gets result tensors whose storages have no buffer yet
(``memory.pending``). Values are tracked per storage, as torch's functionalization does: each
storage the graph wrote has a current value (a reference and the shape it is read as, row-major
over the whole storage). Reading a tensor gives its storage's value, seen through the tensor's
layout (``view``, or ``as_strided`` over the flat storage); a storage the graph has not written
is read from its buffer, as a graph input with the tensor's own layout. Writing a tensor (an
in-place op, ``out=``, ``copy_``) gives its storage a new value: the result itself when the
tensor covers the storage, else ``as_strided_scatter`` of the result into the old value. So views,
aliasing and in-place ops behave as in torch whatever order they come in.

This module only records: the device's fusion layer (``fusion``) decides what may be queued
(the ``decide`` callback gives the records it adds itself their lowering decisions) and runs
what is recorded.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import torch

from nkipy_core.buffers import memory
from nkipy_core.device import scalars
from nkipy_core.device.eager import meta_like

aten = torch.ops.aten


class Ref(tuple):
    """A reference to a value of the graph: ``("in", i)`` its i-th input tensor, ``("op", r, k)``
    the k-th result of record r, ``("key", i)`` the i-th random key, ``("num", i)`` the i-th
    number given to kernels as an input. A tuple (records are keys), of its own type so that no
    argument of an op is taken for one."""

    __slots__ = ()


#: the most records of one graph: past it the graph is run (``fusion``'s "size limit")
MAX_RECORDS = 4096
#: the most numbers one graph takes as inputs, of each kind (each needs its own sentinel)
MAX_NUMBERS = {float: scalars.SENTINEL_FLOATS, int: scalars.SENTINEL_INTS}


class Value:
    """A storage's current value in the graph: ``ref`` read as ``shape`` and ``dtype``
    row-major over the whole storage, and the storage's allocation (weakly: a storage freed
    before the graph runs needs no result)."""

    __slots__ = ("ref", "shape", "dtype", "allocation")

    def __init__(self, ref: Ref, shape: tuple, dtype: torch.dtype, allocation: Any):
        self.ref, self.shape, self.dtype = ref, shape, dtype
        self.allocation = weakref.ref(allocation)


class Decision:
    """How a recorded op lowers: its rule, its results' shapes and dtypes, whether it draws
    random numbers (a key input per call) and which of its numbers are kernel inputs."""

    __slots__ = ("rule", "outputs", "multiple", "random", "lifted")

    def __init__(self, rule: Any, outputs: tuple, multiple: bool, random: bool, lifted: bool):
        self.rule = rule
        self.outputs = outputs  # ((shape, dtype), ...)
        self.multiple = multiple  # the op returns a tuple
        self.random = random
        self.lifted = lifted


class PendingGraph:
    """The ops queued since the last run (see the module docstring)."""

    def __init__(self, decide: Callable[[Any, tuple, dict], Decision | str]):
        self.decide = decide
        #: ``(op, args, kwargs)`` with references in place of tensors and kernel numbers
        self.records: list[tuple] = []
        self.decisions: list[Decision] = []
        #: per record: where the user's code queued it (file, line), ``None`` for the graph's own
        self.locations: list[tuple[str, int] | None] = []
        self.inputs: list[torch.Tensor] = []
        #: per input: shape, dtype, strides and storage offset (part of the graph's key)
        self.input_keys: list[tuple] = []
        self._input_index: dict[tuple, int] = {}
        self.numbers: list[float | int] = []
        self.counts = {float: 0, int: 0}
        self.keys: list[torch.Tensor] = []
        #: storage address -> its current value
        self.values: dict[int, Value] = {}
        #: addresses of every storage the graph reads or writes
        self.touched: set[int] = set()
        #: where the user's code queued the first op (file, line): with that op, the graph's
        #: region (``fusion``'s recompile guard)
        self.region: tuple[str, int] | None = None
        #: what the fusion layer keeps for the configuration the graph was recorded under
        self.owner: Any = None

    def __len__(self) -> int:
        return len(self.records)

    def empty(self) -> bool:
        return not self.records and not self.values

    # -- values ---------------------------------------------------------------------------

    def input(self, t: torch.Tensor) -> Ref:
        """``t`` as an input of the graph, by its layout (CPU tensors copied now: the kernel
        runs later, and a host scalar such as an optimizer's step count changes in between)."""
        allocation = None if t.is_cpu else memory.allocation_of(t)
        key = (
            id(t.untyped_storage()) if allocation is None else allocation.address,
            tuple(t.shape),
            t.dtype,
            t.stride(),
            t.storage_offset(),
        )
        index = self._input_index.get(key)
        if index is None or t.is_cpu:
            index = self._input_index[key] = len(self.inputs)
            self.inputs.append(t.clone() if t.is_cpu else t)
            self.input_keys.append((*key[1:], t.is_cpu))
        return Ref(("in", index))

    def number(self, value: float | int) -> Ref:
        self.numbers.append(value)
        self.counts[type(value)] += 1
        return Ref(("num", len(self.numbers) - 1))

    def has_room(self, floats: int, ints: int) -> bool:
        """Whether ``floats`` and ``ints`` more kernel numbers and one more record fit."""
        return (
            len(self.records) < MAX_RECORDS
            and self.counts[float] + floats <= MAX_NUMBERS[float]
            and self.counts[int] + ints <= MAX_NUMBERS[int]
        )

    def key(self, key: torch.Tensor) -> Ref:
        self.keys.append(key)
        return Ref(("key", len(self.keys) - 1))

    def read(self, t: torch.Tensor) -> Ref | None:
        """A reference to ``t``'s values, or ``None`` if the graph cannot read it (a storage torch
        made on its own, or one whose value the graph holds as another dtype)."""
        if t.is_cpu:
            return self.input(t)
        allocation = memory.allocation_of(t)
        if allocation is None:
            return None
        value = self.values.get(allocation.address)
        if value is None:
            if allocation.buffer is None:
                return None
            self.touched.add(allocation.address)
            return self.input(t)
        if t.dtype != value.dtype:
            return None
        numel = math.prod(value.shape)
        if t.is_contiguous() and t.storage_offset() == 0 and t.numel() == numel:
            if tuple(t.shape) == value.shape:
                return value.ref
            return self.glue(aten.view.default, value.ref, list(t.shape))
        flat = (
            value.ref if len(value.shape) == 1 else self.glue(aten.view.default, value.ref, [numel])
        )
        if flat is None:
            return None
        return self.glue(
            aten.as_strided.default, flat, list(t.shape), list(t.stride()), t.storage_offset()
        )

    def write(self, t: torch.Tensor, ref: Ref) -> bool:
        """Make ``ref`` (of ``t``'s shape and dtype) ``t``'s values; ``False`` (nothing
        recorded) if the graph cannot write ``t``'s storage."""
        allocation = memory.allocation_of(t)
        if allocation is None:
            return False
        nbytes = t.untyped_storage().nbytes()
        if nbytes % t.element_size():
            return False
        numel = nbytes // t.element_size()
        address = allocation.address
        value = self.values.get(address)
        if t.is_contiguous() and t.storage_offset() == 0 and t.numel() == numel:
            self.touched.add(address)
            self.values[address] = Value(ref, tuple(t.shape), t.dtype, allocation)
            return True
        if value is None:
            if allocation.buffer is None:
                return False
            base = self.read(t.as_strided((numel,), (1,), 0))
        elif value.dtype != t.dtype:
            return False
        else:
            base = value.ref
            if len(value.shape) != 1:
                base = self.glue(aten.view.default, base, [numel])
        if base is None:
            return False
        new = self.glue(
            aten.as_strided_scatter.default,
            base,
            ref,
            list(t.shape),
            list(t.stride()),
            t.storage_offset(),
        )
        if new is None:
            return False
        self.touched.add(address)
        self.values[address] = Value(new, (numel,), t.dtype, allocation)
        return True

    def bind(self, t: torch.Tensor, ref: Ref) -> None:
        """``t`` (a new tensor of ``memory.pending``) holds ``ref``."""
        allocation = memory.allocation_of(t)
        assert allocation is not None, "memory.pending makes tensors with an allocation"
        self.touched.add(allocation.address)
        self.values[allocation.address] = Value(ref, tuple(t.shape), t.dtype, allocation)

    # -- records --------------------------------------------------------------------------

    def meta(self, ref: Ref) -> torch.Tensor:
        """A meta tensor standing for a reference's value (the layout a rule sees)."""
        if ref[0] == "in":
            return meta_like(self.inputs[ref[1]])
        if ref[0] == "op":
            shape, dtype = self.decisions[ref[1]].outputs[ref[2]]
            return torch.empty(shape, dtype=dtype, device="meta")
        raise ValueError(f"no meta value for {ref}")

    def glue(self, op: Any, source: Ref, *rest: Any, **kwargs: Any) -> Ref | None:
        """Record an op the graph adds itself (a view of a value, a write into one, a cast), or
        ``None`` if no pack lowers it for these arguments."""
        args = (source, *rest)
        metas = tuple(self.meta(r) if _is_ref(r) else r for r in args)
        decision = self.decide(op, metas, kwargs)
        if isinstance(decision, str):
            return None
        template = tuple(tuple(a) if type(a) is list else a for a in args)
        return self.record(op, template, kwargs, decision)[0]

    def record(
        self,
        op: Any,
        args: tuple,
        kwargs: dict,
        decision: Decision,
        location: tuple[str, int] | None = None,
    ) -> list[Ref]:
        """Append a record (queued at ``location`` of the user's code); its results."""
        index = len(self.records)
        self.records.append((op, args, tuple(kwargs.items())))
        self.decisions.append(decision)
        self.locations.append(location)
        return [Ref(("op", index, k)) for k in range(len(decision.outputs))]


def _is_ref(value: Any) -> bool:
    return type(value) is Ref
