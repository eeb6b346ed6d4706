"""Eager ATen ops on ``nkipy`` tensors, through the same op packs and runtime as compiled graphs.

An op some installed pack lowers becomes a one-node graph, lowered by that pack's rule into a
single-op kernel and compiled once per op, argument shapes and dtypes (kept in memory and in the
on-disk kernel cache). Python floats, and ints given for ``Scalar`` arguments, are kernel
inputs where the rule allows (``scalars``); other non-tensor arguments (dims, sizes, flags) are
part of the key. In-place and ``out=`` ops
run their functional op and copy the result into place on the device (once known to be one
kernel of the target's type, later calls write straight into the target). A repeated call goes
through a flat key to what it ran before (``_fast_key``), skipping the rest of this module. An
op no pack lowers runs on CPU: a ``FallbackWarning`` names it once (strict mode raises) and the
result comes back to the device. Ops whose output shape depends on the data (``masked_select``,
``nonzero``, ``unique``), which no static-shape kernel can express (printing a tensor uses them),
run on CPU by design, without a warning, and so does ``torch._assert_async``, which checks a
value on the host and returns nothing. Random ops run their pack's kernel with a key drawn
from the device's generator at each call (``_Seeded``), as compiled graphs do; with
``fallback_random``, or when no pack lowers them, they run on CPU with torch's generator (then
seeded device runs reproduce CPU runs), without a warning.

What each signature runs is kept in memory, in bounded caches (``nkipy_core.cache.bounded``):
``MAX_SIGNATURES`` call signatures (and as many fast keys), and ``MAX_FLOAT_VALUES`` float
values for each signature whose kernels bake its numbers in. A program that calls an op with ever
new dims, sizes or baked-in numbers evicts the oldest (``cache_stats["eager_signatures_evictions"]``,
``"eager_fast_calls_evictions"``, ``"eager_float_values_evictions"``) instead of holding a kernel
per value; an evicted kernel comes back from the on-disk kernel cache when it is called again.
"""

from __future__ import annotations

import itertools
import logging
import operator
import warnings
from typing import Any

import torch
import torch.fx

from nkipy_core import _torch
from nkipy_core.buffers import memory
from nkipy_core.cache.bounded import BoundedCache
from nkipy_core.compiler import rng
from nkipy_core.compiler.aten_schema import functional_form
from nkipy_core.compiler.fallback import FallbackWarning
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.compiler.kernels import compile_kernel
from nkipy_core.compiler.lower import finish_kernel, lower_subgraph, trace_subgraph
from nkipy_core.compiler.plan import RULE, choose_rule
from nkipy_core.config.settings import Config, current
from nkipy_core.device import aten, overlap, scalars
from nkipy_core.errors import DeviceError, UnsupportedOpsError
from nkipy_core.plugin import manager as plugins
from nkipy_core.plugin.registry import LoweringRule, op_name

#: random ops: they run their pack's kernel, drawing from the device's generator (a key input
#: each call: ``_Seeded``); with ``fallback_random``, or when no pack lowers them, they run on
#: CPU with torch's generator, without a fallback warning
_RANDOM_OPS = frozenset(
    {
        "bernoulli",
        "bernoulli_",
        "cauchy",
        "cauchy_",
        "exponential",
        "exponential_",
        "geometric",
        "geometric_",
        "log_normal",
        "log_normal_",
        "multinomial",
        "native_dropout",
        "normal",
        "normal_",
        "normal_functional",
        "rand",
        "rand_like",
        "randint",
        "randint_like",
        "randn",
        "randn_like",
        "random",
        "random_",
        "randperm",
        "uniform",
        "uniform_",
    }
)
#: what a random op runs on CPU for under ``fallback_random``
_FALLBACK_RANDOM = "random numbers come from torch's CPU generator (fallback_random)"

#: ops run on CPU on purpose (see the module docstring), and why
_HOST_OPS = {
    **dict.fromkeys(
        ("masked_select", "nonzero", "_unique2", "unique_consecutive", "unique_dim"),
        "its output shape depends on the data",
    ),
    # torch._assert_async (RoPE position checks, TorchTitan's among them): a check of a value on
    # the host that returns nothing, as CUDA's kernel raises at the next sync
    "_assert_async": "it checks a value on the host",
}


def host_reason(op: _torch.OpOverload, config: Config) -> str | None:
    """Why ``op`` runs on CPU by design under ``config``, or ``None``."""
    name = _base_name(op)
    if name in _RANDOM_OPS:
        return _FALLBACK_RANDOM if config.fallback_random else None
    return _HOST_OPS.get(name)


log = logging.getLogger("nkipy.device")

#: where eager results live: a process drives one device, ``nkipy:0``
DEVICE = torch.device(memory.NAME, 0)

#: call signatures (and fast keys) whose kernels a process keeps in memory
MAX_SIGNATURES = 4096
#: number values kept per signature whose kernels bake the numbers in (``_ByValue``)
MAX_FLOAT_VALUES = 64


class _Kernels:
    """What each eager call signature runs, for one configuration: a compiled single-op kernel,
    a ``_Decomposition``, or the reason the op runs on CPU."""

    def __init__(self, config: Config):
        self.config = config
        self.entries: BoundedCache[tuple, Any] = BoundedCache("eager_signatures", MAX_SIGNATURES)
        self.warned: set[str] = set()
        loaded = plugins.get(strict=config.strict)
        aten.claim(loaded.lowerings.ops())  # plugins may have been reloaded since the first use
        self.rules = loaded.lowerings
        self.decompositions = loaded.decompositions.table(loaded.lowerings.ops())
        self.decomposing: set[_torch.OpOverload] = set()
        #: ``_fast_key`` -> what a call of all tensors runs: a kernel call, or ``_InPlace``
        self.fast: BoundedCache[tuple, Any] = BoundedCache("eager_fast_calls", MAX_SIGNATURES)
        #: ``_queued_key`` -> how the queue takes a call: ``_Queued``, ``_QueuedInPlace``
        self.queued: BoundedCache[tuple, Any] = BoundedCache("eager_queued_calls", MAX_SIGNATURES)


class _Decomposition:
    """An op no pack lowers, run as its ATen decomposition: each op of it comes back to the
    device (and to the packs) on its own. An op met again inside its own decomposition runs on
    CPU instead of recursing."""

    def __init__(self, op: _torch.OpOverload, fn):
        self.op, self.fn = op, fn

    def __call__(self, args: tuple, kwargs: dict, state: _Kernels) -> Any:
        if self.op in state.decomposing:
            return _on_cpu(self.op, args, kwargs, "its decomposition calls it again", state)
        state.decomposing.add(self.op)
        try:
            return self.fn(*args, **kwargs)
        finally:
            state.decomposing.discard(self.op)


_kernels: _Kernels | None = None


def current_state() -> _Kernels:
    global _kernels
    config = current()
    if _kernels is None or _kernels.config is not config:
        _kernels = _Kernels(config)
    return _kernels


#: ops whose index tensors may live on CPU, as torch allows for other devices
_INDEXING = frozenset({"index", "index_put", "index_put_", "_index_put_impl", "_index_put_impl_"})


#: op -> positions of its arguments declared ``Tensor``
_TENSOR_POSITIONS: dict[_torch.OpOverload, tuple[int, ...]] = {}


def _numbers_as_tensors(op: _torch.OpOverload, args: tuple) -> tuple:
    """``args`` with a Python number in a ``Tensor`` position made a 0-dim CPU tensor again.

    A composite such as ``xlogy.Scalar_Other`` calls ``xlogy.OutTensor`` with the scalar wrapped
    as a 0-dim tensor, and torch's boxing hands the device's fallback that wrapped number as a
    Python number, which the ``Tensor`` overload then refuses. The tensor keeps the number's
    category without promoting a dimensioned operand of it (f64 beside floats, else the default
    float dtype, i64 or bool), as the wrapped number did.
    """
    positions = _TENSOR_POSITIONS.get(op)
    if positions is None:
        positions = _TENSOR_POSITIONS[op] = tuple(
            i
            for i, a in enumerate(_torch.schema(op).arguments)
            if isinstance(a.type, torch.TensorType) and not a.kwarg_only
        )
    if not any(i < len(args) and type(args[i]) in (bool, int, float) for i in positions):
        return args
    floats = any(isinstance(a, torch.Tensor) and a.is_floating_point() for a in args)
    number_dtypes = {
        bool: torch.bool,
        int: torch.int64,
        float: torch.float64 if floats else torch.get_default_dtype(),
    }
    return tuple(
        torch.scalar_tensor(a, dtype=number_dtypes[type(a)])
        if i in positions and type(a) in number_dtypes
        else a
        for i, a in enumerate(args)
    )


#: argument types a fast key takes by value (with the type: ``True`` and ``1`` are different)
_BY_VALUE = (bool, int, str, torch.dtype, type(None))


def _fast_key(op: _torch.OpOverload, args: tuple, kwargs: dict) -> tuple | None:
    """A cheap key of a call whose arguments are tensors, ints, bools, strings, dtypes, ``None``
    and lists of ints (``torch.add(a, b)``, ``a.sum([-1])``, and ``a.add_(b)``, which reaches
    the device as ``add.out(a, b, out=a)``): tensors by shape, dtype and whether they are on
    CPU, the rest by type and value; ``None`` for any other call (Python floats, which may be
    kernel inputs, lists of tensors). It determines the full path's key (``_signature``)."""
    key: list[Any] = [op]
    for value in args:
        if isinstance(value, torch.Tensor):
            if not _plain(value):
                return None  # the full path keys its layout
            key += (value.shape, value.dtype, value.is_cpu)
        elif type(value) in _BY_VALUE:
            key += (type(value), value)
        elif type(value) in (list, tuple) and all(type(v) is int for v in value):
            key += (type(value), tuple(value))
        else:
            return None
    for name, value in kwargs.items():
        if isinstance(value, torch.Tensor):
            if not _plain(value):
                return None
            key += (name, value.shape, value.dtype, value.is_cpu)
        elif type(value) in _BY_VALUE:
            key += (name, type(value), value)
        else:
            return None
    return tuple(key)


def _plain(t: torch.Tensor) -> bool:
    """Whether ``t`` lies in its storage as a new tensor would (row-major, from the start)."""
    return t.is_contiguous() and t.storage_offset() == 0


def _layout(t: torch.Tensor) -> tuple:
    """What a key holds of ``t``'s layout: nothing for a plain tensor, else strides and offset.

    Kernels compute on values, so most rules give one kernel for every layout; the few that
    address storage (``as_strided``, ``as_strided_scatter``) read the placeholder's layout, so
    the key must tell layouts apart. A plain tensor, the common case, costs nothing more."""
    return () if _plain(t) else (t.stride(), t.storage_offset())


def run(op: _torch.OpOverload, args: tuple, kwargs: dict) -> Any:
    """Run one ATen op on ``nkipy`` tensors (what the device's boxed fallback calls).

    A call made before with the same ``_fast_key`` goes straight to what it ran then
    (``_Kernels.fast``), and while the queue takes ops one with the same ``_queued_key`` goes
    straight to the queue (``_Kernels.queued``); the first call of each such signature takes
    the full path, which decides what may go there."""
    state = current_state()
    queue = _queue if _queue is not None and _queue.active(state.config) else None
    key = _fast_key(op, args, kwargs) if queue is None else _queued_key(op, args, kwargs)
    if key is not None:
        known = (state.fast if queue is None else state.queued).get(key)
        if known is not None:
            return known(args, kwargs)
    return _run(op, args, kwargs, state, key, queue)


def _run(
    op: _torch.OpOverload,
    args: tuple,
    kwargs: dict,
    state: _Kernels,
    fast_key: tuple | None,
    queue: Any,
) -> Any:
    """``run`` past the fast keys: the op queued (``queue``; ``fast_key`` is then the call's
    ``_queued_key``), else now, as its own kernel (or on CPU). In-place and ``out=`` ops queue
    their functional op, then the write."""
    given = args
    args = _numbers_as_tensors(op, args)
    if _updates_running_stats(op, args):
        return _batch_norm_training(*args)
    if len(args) > 1 and isinstance(args[1], (list, tuple)) and _base_name(op) in _INDEXING:
        indices = [memory.from_host(i) if _on_host(i) else i for i in args[1]]
        args = (args[0], indices, *args[2:])
        fast_key = None
    if queue is not None:
        if not _mutable(op):
            result = queue.enqueue(op, args, kwargs, state)
            if result is not NOT_QUEUED and fast_key is not None:
                plan = queue.plan(op, args, kwargs, state)
                if plan is not None:  # later calls like this one go straight to the queue
                    state.queued[fast_key] = _Queued(op, plan)
            if result is not NOT_QUEUED:
                return result
        queued_key, fast_key = fast_key, None
    else:
        queued_key = None
        if args is not given:  # numbers made tensors: what runs takes other arguments
            fast_key = None
    tensors: list[torch.Tensor] = []
    numbers: list[float | int] = []
    key = call_key(op, args, kwargs, tensors, numbers)
    check_devices(op, tensors)
    entry = state.entries.get(key)
    if entry is None:
        if _torch.schema(op).is_mutable:
            return _mutating(op, args, kwargs, state, fast_key, queued_key)
        entry = state.entries[key] = _build(op, args, kwargs, state, numbers)
    if fast_key is not None and not numbers and "memory_format" not in kwargs:
        _remember_call(fast_key, entry, args, tensors, state)
    if isinstance(entry, _Lifted):
        return entry(tensors, numbers)
    layout = kwargs.get("memory_format")
    if layout in (torch.channels_last, torch.channels_last_3d) and isinstance(entry, KernelCall):
        return _in_memory_format(entry(*tensors), layout)
    if isinstance(entry, _ByValue):
        values = tuple(numbers)
        by_value = entry.get(values)
        if by_value is None:
            by_value = entry[values] = _by_value(op, args, kwargs, state)
        entry = by_value
    if isinstance(entry, str):
        return _on_cpu(op, args, kwargs, entry, state)
    if isinstance(entry, _Decomposition):
        return entry(args, kwargs, state)
    return entry(*tensors)


def _queued_key(op: _torch.OpOverload, args: tuple, kwargs: dict) -> tuple | None:
    """A cheap key of a call for the queue's plans (``_Kernels.queued``): tensors by shape,
    dtype, whether on CPU and layout, floats ``call_key`` lifts by type only (they are kernel
    inputs), the rest of ``_fast_key``'s arguments by type and value; ``None`` for others."""
    key: list[Any] = [op]
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            key += (value.shape, value.dtype, value.is_cpu, _layout(value))
        elif type(value) is float:
            key.append(float if scalars.liftable(value) else (float, repr(value)))
        elif type(value) in _BY_VALUE:
            key += (type(value), value)
        elif type(value) in (list, tuple) and all(type(v) is int for v in value):
            key += (type(value), tuple(value))
        else:
            return None
    key.append(tuple(kwargs))
    return tuple(key)


class _Queued:
    """A call signature the queue took before, as a ``_Kernels.queued`` entry: its ``plan``
    (the queue's, which records the call) after the call's numbers are made tensors."""

    def __init__(self, op: _torch.OpOverload, plan):
        self.op, self.plan = op, plan

    def __call__(self, args: tuple, kwargs: dict) -> Any:
        args = _numbers_as_tensors(self.op, args)
        result = self.plan(args, kwargs)
        if result is NOT_QUEUED:  # the queue cannot read one of the tensors now
            return _run(self.op, args, kwargs, current_state(), None, _queue)
        return result


class _QueuedInPlace:
    """An in-place op whose functional op the queue took (``_Queued``), as a ``_Kernels.queued``
    entry: torch's checks before a write, the functional op queued, its result written into
    ``self`` in the queue."""

    def __init__(self, op: _torch.OpOverload, functional: _Queued, dropped: list):
        self.op, self.functional = op, functional
        self.defaults = tuple(a.default_value for a in dropped if not a.kwarg_only)
        self.kw_defaults = {a.name: a.default_value for a in dropped if a.kwarg_only}

    def __call__(self, args: tuple, kwargs: dict) -> Any:
        args = _numbers_as_tensors(self.op, args)
        self_ = args[0]
        inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        overlap.check_write(self_, inputs)  # what ``_check_writes`` does (no nested tensors)
        args = (*args, *self.defaults)
        kwargs = {**self.kw_defaults, **kwargs} if self.kw_defaults else kwargs
        _store(self.op, self_, self.functional(args, kwargs), resize=False)
        return self_


#: what ``run`` returns when the queue takes no op (see ``queue_with``)
NOT_QUEUED = object()
#: the eager queue (``fusion``), which sits above this module: given at the device's first use
_queue: Any = None


def queue_with(queue: Any) -> None:
    """Let ``queue`` take eager ops before they run: ``queue.active(config)`` says whether it
    queues now, ``queue.enqueue(op, args, kwargs, state)`` queues an op (or returns
    ``NOT_QUEUED``) and ``queue.write(dst, src)`` queues ``dst``'s new value (or returns
    ``False``). The device's first-use work gives it (``registration``)."""
    global _queue
    _queue = queue


#: op -> whether its schema writes an argument
_MUTABLE: dict[_torch.OpOverload, bool] = {}


def _mutable(op: _torch.OpOverload) -> bool:
    answer = _MUTABLE.get(op)
    if answer is None:
        answer = _MUTABLE[op] = _torch.schema(op).is_mutable
    return answer


#: a key for the next random op's kernel, instead of a draw (``run_with_key``)
_given_key: torch.Tensor | None = None


def run_with_key(op: _torch.OpOverload, args: tuple, kwargs: dict, key: torch.Tensor) -> Any:
    """``run`` a random op with the key its queued call drew (``rng.key_tensor``), so that
    running queued ops one by one gives the numbers they would have given when queued."""
    global _given_key
    _given_key = key
    try:
        return run(op, args, kwargs)
    finally:
        _given_key = None


def _on_host(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "cpu"


def _in_memory_format(result: torch.Tensor, layout: torch.memory_format) -> torch.Tensor:
    """Kernels produce contiguous results; give one the channels-last strides asked for."""
    if result.is_contiguous(memory_format=layout):
        return result
    strided = torch.empty_like(result, memory_format=layout)
    memory.runtime().copy(memory.array(result), memory.array(strided))
    return strided


def _base_name(op: _torch.OpOverload) -> str:
    return _torch.schema(op).name.split("::")[1]


#: op -> positions and names of its arguments declared ``Scalar`` (ints there may be lifted)
_SCALAR_SLOTS: dict[_torch.OpOverload, frozenset[int | str]] = {}


def _scalar_slots(op: _torch.OpOverload) -> frozenset[int | str]:
    """Where ``op`` takes a ``Scalar`` (``clamp``'s bounds, ``fill``'s value): by position
    and by name, as a call may give it either way."""
    slots = _SCALAR_SLOTS.get(op)
    if slots is None:
        slots = _SCALAR_SLOTS[op] = frozenset(
            slot
            for i, a in enumerate(_torch.schema(op).arguments)
            if isinstance(_optional_element(a.type), torch.NumberType)
            for slot in (i, a.name)
        )
    return slots


def _optional_element(type_: Any) -> Any:
    """``T`` of a schema type ``T?``, else the type itself."""
    return type_.getElementType() if isinstance(type_, torch.OptionalType) else type_


def call_key(
    op: _torch.OpOverload,
    args: tuple,
    kwargs: dict,
    tensors: list[torch.Tensor],
    numbers: list[float | int],
) -> tuple:
    """The key of a call's signature (``_signature`` of each argument, ints in ``Scalar``
    slots lifted too); collects the tensors and the lifted numbers in argument order."""
    slots = _scalar_slots(op)
    return (
        op,
        tuple(_signature(a, tensors, numbers, i in slots) for i, a in enumerate(args)),
        tuple((k, _signature(v, tensors, numbers, k in slots)) for k, v in kwargs.items()),
    )


def _signature(
    value: Any, tensors: list[torch.Tensor], numbers: list[float | int], scalar: bool = False
) -> Any:
    """A hashable key of an ATen argument: tensors by shape, dtype, device and layout, Python
    floats (and ints given for a ``Scalar``, ``scalar``) by type only (they become kernel
    inputs, see ``scalars``), anything else by value. Collects the tensors and those numbers."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return (tuple(value.shape), value.dtype, value.device.type, _layout(value))
    if scalars.liftable(value) or (scalar and scalars.liftable_int(value)):
        numbers.append(value)
        return type(value)
    if type(value) is float:
        return (float, repr(value))  # NaN != NaN would miss the cache every time
    if isinstance(value, (list, tuple)):
        return tuple(_signature(v, tensors, numbers) for v in value)
    return (type(value), value)


def fill_call(op: _torch.OpOverload, args: tuple, kwargs: dict, tensors, numbers) -> tuple:
    """``args`` and ``kwargs`` with each tensor replaced by the next of ``tensors`` and each
    number ``call_key`` lifts by the next of ``numbers`` (in ``call_key``'s order), lists made
    tuples and devices ``meta`` (as in ``one_node_graph``'s node): a call's template."""
    slots = _scalar_slots(op)

    def one(value: Any, scalar: bool = False) -> Any:
        if isinstance(value, torch.Tensor):
            return next(tensors)
        if scalars.liftable(value) or (scalar and scalars.liftable_int(value)):
            return next(numbers)
        if isinstance(value, (list, tuple)):
            return tuple(one(v) for v in value)
        if isinstance(value, torch.device):
            return torch.device("meta")
        return value

    return (
        tuple(one(a, i in slots) for i, a in enumerate(args)),
        {k: one(v, k in slots) for k, v in kwargs.items()},
    )


def lifted_slots(op: _torch.OpOverload, args: tuple, kwargs: dict) -> list[int | str]:
    """The positions and names of the arguments ``call_key`` lifts as kernel numbers (at the
    top level: numbers inside lists are not counted)."""
    slots = _scalar_slots(op)
    return [
        k
        for k, v in (*enumerate(args), *kwargs.items())
        if scalars.liftable(v) or (k in slots and scalars.liftable_int(v))
    ]


def check_devices(op: _torch.OpOverload, tensors: list[torch.Tensor]) -> None:
    """All tensors on the device, except 0-dim CPU tensors (scalars), as torch allows for CUDA."""
    for t in tensors:
        if t.device.type != memory.NAME and t.dim() != 0:
            raise DeviceError(
                f"{op_name(op)} got tensors on nkipy and on {t.device}; an eager op runs on one "
                f"device. Move the {t.device} tensor with .to('nkipy') (or the nkipy ones with "
                ".cpu())."
            )


# -- single-op kernels ------------------------------------------------------------------------


def _build(
    op: _torch.OpOverload,
    args: tuple,
    kwargs: dict,
    state: _Kernels,
    numbers: list[float | int],
) -> Any:
    """What a call signature runs: a kernel (taking the call's lifted numbers as inputs if it
    has any), else the op's decomposition, else the reason it runs on CPU; ``_ByValue`` when the
    numbers must be part of the key."""
    if not numbers or not state.rules.rules_for(op):  # no rule: the numbers change nothing
        return _by_value(op, args, kwargs, state)
    lifted = _lifted(op, args, kwargs, state) if len(numbers) <= scalars.MAX_FLOATS else None
    return lifted if lifted is not None else _ByValue()


def _by_value(op: _torch.OpOverload, args: tuple, kwargs: dict, state: _Kernels) -> Any:
    decision = _kernel(op, args, kwargs, state)
    if isinstance(decision, str) and op in state.decompositions:
        return _Decomposition(op, state.decompositions[op])
    return decision


class _ByValue(BoundedCache):
    """Entries of one call signature keyed by its number values (their kernels bake them in)."""

    __slots__ = ()

    def __init__(self):
        super().__init__("eager_float_values", MAX_FLOAT_VALUES)


class _Lifted:
    """A kernel that takes the call's lifted numbers as trailing inputs (see ``scalars``): f64
    for a float, i64 for an int."""

    def __init__(self, call):
        self.call = call

    def __call__(self, tensors: list[torch.Tensor], numbers: list[float | int]) -> Any:
        return self.call(*tensors, *(torch.tensor(n, dtype=_DTYPES[type(n)]) for n in numbers))


#: the dtype of the kernel input a lifted number becomes
_DTYPES = {float: torch.float64, int: torch.int64}


def _lifted(op: _torch.OpOverload, args: tuple, kwargs: dict, state: _Kernels) -> _Lifted | None:
    """The kernel with this call's lifted numbers as inputs, or ``None`` if the rule does not
    allow it (or the op is random: its kernel takes a key as well, ``_Seeded``)."""
    if _base_name(op) in _RANDOM_OPS or _base_name(op) in _HOST_OPS:
        return None
    numbers: list[float | int] = []
    args_a, kwargs_a = scalars.substitute(args, kwargs, _scalar_slots(op), numbers, 0)

    def lower(sub: torch.fx.GraphModule, name: str):
        rule = next(n.meta[RULE] for n in sub.graph.nodes if RULE in n.meta)
        return finish_kernel(_lifted_kernel(op, args, kwargs, rule, name))

    try:
        call = _kernel(op, args_a, kwargs_a, state, lower)
    except Exception:  # noqa: BLE001 - NotLiftable, or a sentinel the op rejects: key by value
        return None
    return _Lifted(call) if isinstance(call, KernelCall) else None


def lifts_numbers(op: _torch.OpOverload, args: tuple, kwargs: dict, rule: LoweringRule) -> bool:
    """Whether ``rule`` lowers this call with its numbers as kernel inputs (``scalars``)."""
    if _base_name(op) in _RANDOM_OPS or _base_name(op) in _HOST_OPS:
        return False
    try:
        _lifted_kernel(op, args, kwargs, rule, "trial")
    except Exception:  # noqa: BLE001 - NotLiftable, or a sentinel the op rejects
        return False
    return True


def _lifted_kernel(op: _torch.OpOverload, args: tuple, kwargs: dict, rule, name: str):
    """The call's kernel (traced, not simplified) with its numbers as inputs: lowered with
    sentinels of two kinds and with the real values, each lifted (``scalars.lift``), which must
    give one kernel; ``NotLiftable`` (or the op's own error for a sentinel) otherwise."""
    numbers: list[float | int] = []
    slots = _scalar_slots(op)
    calls = [
        scalars.substitute(args, kwargs, slots, numbers, 0),
        scalars.substitute(args, kwargs, slots, [], 1),
        (args, kwargs),
    ]
    values = [scalars.sentinels(numbers, 0), scalars.sentinels(numbers, 1), numbers]
    kernels = []
    for (call_args, call_kwargs), lowered_with in zip(calls, values):
        built = one_node_graph(op, call_args, call_kwargs)
        if isinstance(built, str):
            raise scalars.NotLiftable(built)
        sub, node = built
        node.meta[RULE] = rule
        try:
            kernels.append(scalars.lift(trace_subgraph(sub, name), lowered_with))
        except Exception as exc:  # noqa: BLE001 - e.g. the rule declines a sentinel
            raise scalars.NotLiftable(str(exc)) from exc
    if not scalars.same(kernels):
        raise scalars.NotLiftable("the kernel depends on the values")
    return kernels[0]


def _kernel(op: _torch.OpOverload, args: tuple, kwargs: dict, state: _Kernels, lower=None) -> Any:
    """The compiled single-op kernel for these arguments (``_Seeded`` for a random op), or the
    reason there is none."""
    reason = host_reason(op, state.config)
    if reason is not None:
        return reason
    built = one_node_graph(op, args, kwargs)
    if isinstance(built, str):
        return built
    sub, node = built
    random = rng.is_random(node)
    if random:
        rng.seed_eager_op(sub, node)
    decision = choose_rule(node, state.rules, state.config, memory.runtime())
    if not isinstance(decision, LoweringRule):
        return decision
    node.meta[RULE] = decision
    name = "eager_" + op_name(op).replace(".", "_")
    call = compile_kernel(
        sub,
        name,
        state.config,
        memory.runtime(),
        on_device=True,
        lower=lower or lower_subgraph,
    )
    return _Seeded(call) if random else call


class _Seeded:
    """A random op's kernel: at each call it takes a key input drawn from the device's
    generator (``rng.draw``), after the call's tensors."""

    def __init__(self, call: KernelCall):
        self.call = call

    def __call__(self, *tensors: torch.Tensor) -> Any:
        global _given_key
        key, _given_key = _given_key, None
        return self.call(*tensors, rng.key_tensor(*rng.draw(1, DEVICE)) if key is None else key)


def meta_like(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with ``t``'s shape, dtype, strides and storage offset: rules that address
    storage read the layout from it (``_layout`` keys it)."""
    if _plain(t):
        return torch.empty(t.shape, dtype=t.dtype, device="meta")
    storage = t.untyped_storage().nbytes() // t.element_size()
    base = torch.empty(storage, dtype=t.dtype, device="meta")
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def one_node_graph(
    op: _torch.OpOverload, args: tuple, kwargs: dict
) -> tuple[torch.fx.GraphModule, torch.fx.Node] | str:
    """A one-node graph calling ``op`` on placeholders for the tensors (with meta values), or
    why there can be none."""
    graph = torch.fx.Graph()
    count = itertools.count()

    def placeholder(x):
        if isinstance(x, torch.Tensor):
            node = graph.placeholder(f"arg{next(count)}")
            node.meta["val"] = meta_like(x)
            return node
        return torch.device("meta") if isinstance(x, torch.device) else x

    node_args, node_kwargs = _torch.tree_map(placeholder, (args, kwargs))
    meta = _torch.tree_map(
        lambda n: n.meta["val"] if isinstance(n, torch.fx.Node) else n, (node_args, node_kwargs)
    )
    try:
        value = op(*meta[0], **meta[1])
    except NotImplementedError:
        return "torch has no shape function for it (its output shape depends on the data)"
    except RuntimeError as exc:  # stricter than the CPU kernel (``_grouped_mm`` of f32), or wrong
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"torch's shape function refuses these arguments ({reason})"
    node = graph.call_function(op, tuple(node_args), node_kwargs)
    node.meta["val"] = value
    if isinstance(value, torch.Tensor):
        graph.output(node)
    elif isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        outputs = []
        for i, v in enumerate(value):
            item = graph.call_function(operator.getitem, (node, i))
            item.meta["val"] = v
            outputs.append(item)
        graph.output(tuple(outputs))
    else:
        return "it does not return tensors"
    try:
        gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    except SyntaxError:  # e.g. an overload named like a Python keyword (aten.random.from)
        return "torch.fx cannot generate code for it"
    _torch.forget_graph_source(gm)  # one per new signature: torch.fx would keep each forever
    return gm, node


# -- in-place and out= ops ----------------------------------------------------------------------


def _updates_running_stats(op: _torch.OpOverload, args: tuple) -> bool:
    """``native_batch_norm`` in training updates its running stats without its schema saying so."""
    return (
        op is torch.ops.aten.native_batch_norm.default
        and len(args) == 8
        and args[5]
        and args[3] is not None
    )


def _batch_norm_training(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """Its functional form returns the new running stats; they are copied into place here."""
    out, mean, invstd, new_mean, new_var = run(
        torch.ops.aten._native_batch_norm_legit_functional.default,
        (input, weight, bias, running_mean, running_var, training, momentum, eps),
        {},
    )
    running_mean.copy_(new_mean)
    running_var.copy_(new_var)
    return out, mean, invstd


class _Call:
    """A kernel whose inputs are the call's positional tensors, as a ``_Kernels.fast`` entry."""

    def __init__(self, call, positions: tuple[int, ...] | None):
        self.call = call  # a KernelCall, or its device_call
        self.positions = positions  # of the tensors among the arguments; None: all of them

    def __call__(self, args: tuple, kwargs: dict) -> torch.Tensor:
        if self.positions is None:
            return self.call(*args)
        return self.call(*[args[i] for i in self.positions])


def _remember_call(
    fast_key: tuple, entry: Any, args: tuple, tensors: list[torch.Tensor], state: _Kernels
) -> None:
    """Let later calls like this one go straight to ``entry`` if it is a kernel of exactly the
    call's positional tensors (not of numbers, of keyword tensors or of a memory format); to its
    ``device_call`` if they are all on the device and it returns one tensor there (the fast
    key holds where each tensor is, so every later call is alike)."""
    if not isinstance(entry, KernelCall):
        return
    positions = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
    if len(positions) != len(tensors):
        return
    on_device = entry.single and entry.on_device[0] and not any(t.is_cpu for t in tensors)
    call = entry.device_call if on_device else entry
    state.fast[fast_key] = _Call(call, None if len(positions) == len(args) else positions)


class _InPlace:
    """An in-place or ``out=`` op (``a.add_(b)``) whose functional kernel gives a result of its
    target's shape and dtype, as a ``_Kernels.fast`` entry: the kernel writes into the target
    (``KernelCall.run_into``) instead of into a new tensor that is then copied."""

    def __init__(self, call: KernelCall, out: str | None):
        self.call = call
        self.out = out  # the keyword of an out= op's target; None: the target is ``self``

    def __call__(self, args: tuple, kwargs: dict) -> torch.Tensor:
        target = args[0] if self.out is None else kwargs[self.out]
        # every tensor here is plain (``_fast_key``): two share memory iff they start together,
        # and then only the same shape is the same memory (torch allows that, not a part of it)
        start = target.data_ptr()
        for t in args:
            if t is not target and t.data_ptr() == start and t.shape != target.shape:
                if t.numel() and target.numel():
                    raise RuntimeError(overlap.PARTIAL_OVERLAP)
        self.call.run_into((target,), *args)
        return target


def _in_place(
    functional: _torch.OpOverload,
    args: tuple,
    kwargs: dict,
    target: torch.Tensor,
    out: str | None,
    state: _Kernels,
) -> _InPlace | None:
    """``_InPlace`` for a mutating op that wrote ``target`` with ``functional(*args, **kwargs)``
    (``args`` all tensors, ``kwargs`` none), if ``run`` ran that as one kernel of exactly ``args``
    whose single output is on the device with ``target``'s shape and dtype."""
    tensors: list[torch.Tensor] = []
    numbers: list[float | int] = []
    call = state.entries.get(call_key(functional, args, kwargs, tensors, numbers))
    if not isinstance(call, KernelCall) or len(tensors) != len(args) or numbers:
        return None
    if not call.single or not call.on_device[0]:
        return None
    (result,) = call.executable.signature.outputs
    if tuple(target.shape) != result.shape or target.dtype != result.dtype.torch:
        return None
    return _InPlace(call, out)


def _check_writes(written: list[torch.Tensor], args: tuple, kwargs: dict) -> None:
    """Refuse what torch refuses before an op writes (``overlap``): the result would depend on
    the order of the writes, which a kernel does not have."""
    inputs = [t for t in _torch.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    for target in written:
        overlap.check_write(target, inputs)


def _mutating(
    op: _torch.OpOverload,
    args: tuple,
    kwargs: dict,
    state: _Kernels,
    fast_key: tuple | None,
    queued_key: tuple | None = None,
) -> Any:
    if op is torch.ops.aten._index_put_impl_.default:
        # what `x[i] = v` reaches: index_put_ plus an `unsafe` flag that only skips checks
        args, kwargs = args[:4], {k: v for k, v in kwargs.items() if k != "unsafe"}
        op = torch.ops.aten.index_put_.default
    functional = None if host_reason(op, state.config) else functional_form(op)
    if functional is not None and _torch.schema(op).name.endswith("_"):
        _check_writes(_written(op, args, kwargs), args, kwargs)
    if functional is None:
        return _on_cpu(op, args, kwargs, "no functional form of it is known", state)
    # the dispatcher drops arguments equal to their default; the functional form may lack it
    # (bernoulli_.float has p=0.5, bernoulli.p has no default). Positional ones stay positional:
    # a lowering rule cannot take ``uniform``'s ``from`` and ``to`` by name
    dropped = [
        a
        for i, a in enumerate(_torch.schema(op).arguments)
        if i >= len(args) and a.has_default_value() and not (a.alias_info and a.alias_info.is_write)
    ]
    args = (*args, *(a.default_value for a in dropped if not a.kwarg_only))
    kwargs = {**{a.name: a.default_value for a in dropped if a.kwarg_only}, **kwargs}
    if not _torch.schema(op).name.endswith("_"):  # out=
        outs = {
            a.name: kwargs[a.name]
            for a in _torch.schema(op).arguments
            if a.alias_info and a.alias_info.is_write
        }
        rest = {k: v for k, v in kwargs.items() if k not in outs}
        names = {a.name for a in _torch.schema(functional).arguments}
        first = next(iter(outs.values()))
        if "dtype" in names and "device" in names:  # a factory: make what out= holds
            rest.update(dtype=first.dtype, device=first.device)
        results = run(functional, args, rest)
        results = results if isinstance(results, (tuple, list)) else (results,)
        for out, result in zip(outs.values(), results):
            # an out= tensor that is also an input is not resized (torch's TensorIterator);
            # one of the result's shape is checked as an in-place target (a resized one has
            # fresh memory of its own)
            read_too = any(t is out for t in _torch.tree_leaves(args))
            if out.shape == result.shape:
                _check_writes([out], args, kwargs)
            _store(op, out, result, resize=not read_too)
        if fast_key is not None and len(outs) == 1:  # every argument a tensor
            _remember_in_place(fast_key, functional, args, rest, first, next(iter(outs)), state)
        return tuple(outs.values()) if len(outs) > 1 else first
    self = args[0]
    _store(op, self, run(functional, args, kwargs), resize=False)
    if fast_key is not None:
        _remember_in_place(fast_key, functional, args, kwargs, self, None, state)
    functional_key = None if queued_key is None else _queued_key(functional, args, kwargs)
    if queued_key is not None and functional_key is not None:
        functional_plan = state.queued.get(functional_key)
        if isinstance(functional_plan, _Queued):
            state.queued[queued_key] = _QueuedInPlace(op, functional_plan, dropped)
    return self


def _remember_in_place(
    fast_key: tuple, functional, args: tuple, kwargs: dict, target, out: str | None, state
) -> None:
    """Let later calls like this one write into their target directly (``_InPlace``)."""
    in_place = _in_place(functional, args, kwargs, target, out, state)
    if in_place is not None:
        state.fast[fast_key] = in_place


def _scalar_type(dtype: torch.dtype) -> str:
    """torch's name of a dtype in its error messages (``Float``, ``Long``, ``BFloat16``)."""
    return torch.empty(0, dtype=dtype).type().removeprefix("torch.").removesuffix("Tensor")


def _store(op, dst: torch.Tensor, result: torch.Tensor, resize: bool) -> None:
    """Write a functional result into an in-place target (same shape) or an ``out=`` tensor
    (resized as torch does), with torch's casting rule."""
    if not torch.can_cast(result.dtype, dst.dtype):
        raise RuntimeError(
            f"{op_name(op)}: result type {_scalar_type(result.dtype)} can't be cast to the desired "
            f"output type {_scalar_type(dst.dtype)}"
        )
    if dst.shape != result.shape:
        if not resize:
            raise RuntimeError(
                f"{op_name(op)}: output with shape {list(dst.shape)} doesn't match the broadcast "
                f"shape {list(result.shape)}"
            )
        dst.resize_(result.shape)
    if result.dtype == dst.dtype and memory.is_nkipy(result):
        if _queue is None or not _queue.write(dst, result):  # queued, else now:
            memory.runtime().copy(memory.array(result), memory.array(dst))  # no dispatcher trip
    else:
        dst.copy_(result)


# -- CPU fallback -------------------------------------------------------------------------------


def _on_cpu(op: _torch.OpOverload, args: tuple, kwargs: dict, why: str, state: _Kernels) -> Any:
    """Run ``op`` on CPU copies; write mutated arguments back and return results on the device.

    The op runs before the fallback is reported (strict: refused), so that a call torch refuses
    on CPU too (wrong shapes) raises torch's error, not a fallback: nothing reaches the device
    before the report."""
    written = {id(t) for t in _written(op, args, kwargs)}
    moved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def to_cpu(x):
        if memory.is_nkipy(x):
            host = _same_layout(x, memory.to_host(x))
            if id(x) in written:
                host = host.clone()  # resizable, as out= arguments must be
                moved[id(host)] = (x, host)
            return host
        if isinstance(x, torch.device) and x.type == memory.NAME:
            return torch.device("cpu")
        return x

    result = op(*_torch.tree_map(to_cpu, args), **_torch.tree_map(to_cpu, kwargs))
    name = op_name(op)
    if _base_name(op) not in _HOST_OPS and _base_name(op) not in _RANDOM_OPS:
        if state.config.strict:
            raise UnsupportedOpsError([f"{name} ({why}; eager on nkipy)"])
        if name not in state.warned:
            state.warned.add(name)
            log.info("fallback: eager %s runs on CPU: %s", name, why)
            warnings.warn(
                f"nkipy: {name} runs on CPU: {why}; its result comes back to the nkipy device",
                FallbackWarning,
                stacklevel=3,
            )
    for device, host in moved.values():
        if device.shape != host.shape:
            device.resize_(host.shape)
        device.copy_(host)

    def to_device(x):
        if isinstance(x, torch.Tensor) and x.device.type == "cpu":
            original = moved.get(id(x))
            return original[0] if original is not None else _from_host_as_laid_out(x)
        return x

    return _torch.tree_map(to_device, result)


def _from_host_as_laid_out(host: torch.Tensor) -> torch.Tensor:
    """A CPU op's result on the device with the strides and storage offset torch gave it: a
    later op that addresses storage (``as_strided_scatter`` of an ``as_strided_scatter``) reads
    them. Expanded results (stride 0) come back contiguous."""
    if _plain(host) or host.numel() == 0 or 0 in host.stride():
        return memory.from_host(host)
    extent = _extent(host)
    device = memory.empty((extent,), host.dtype).as_strided(
        host.shape, host.stride(), host.storage_offset()
    )
    memory.write(device, host)
    return device


def _extent(t: torch.Tensor) -> int:
    """Elements of storage ``t`` reaches, from the storage's start."""
    return int(t.storage_offset()) + 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))


def _same_layout(t: torch.Tensor, host: torch.Tensor) -> torch.Tensor:
    """``host`` (contiguous) laid out as ``t`` in a storage of its own: the same strides and
    storage offset, as torch's ``clone_preserve_strides`` keeps them. Ops that address storage
    (``as_strided_scatter``) give torch's result only on that layout, and some CPU kernels accept
    a layout but not its contiguous copy (``_grouped_mm`` needs 16-byte aligned strides, which a
    transposed operand has and its copy may not). Elements in the gaps are never read back."""
    if _plain(t) or t.numel() == 0:
        return host
    if overlap.internally_overlaps(t):
        return host  # expanded: torch clones such a tensor contiguous as well
    storage = torch.empty(_extent(t), dtype=host.dtype)
    return storage.as_strided(t.shape, t.stride(), t.storage_offset()).copy_(host)


def _written(op: _torch.OpOverload, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors ``op`` mutates, per its schema."""
    found: list[torch.Tensor] = []
    for i, a in enumerate(_torch.schema(op).arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        value = kwargs.get(a.name) if a.kwarg_only or i >= len(args) else args[i]
        found.extend(
            v
            for v in (value if isinstance(value, (list, tuple)) else [value])
            if isinstance(v, torch.Tensor)
        )
    return found
