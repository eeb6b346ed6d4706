"""Eager fusion: eager ops on the device are queued and run as one kernel where a value is needed.

On Trainium every kernel launch has a fixed cost and every new op sequence a compile, so running
each eager op as its own kernel makes eager slow. Instead an op some pack lowers is recorded in
the pending graph (``pending``) and returns tensors whose buffers do not exist yet. The graph
runs ("flushes") as one kernel, through the same lowering rules, kernel compile and kernel cache
as compiled graphs, when torch needs a value:

* a buffer the graph reads or writes is used outside it: a copy to the host (``.cpu()``,
  ``.item()``, ``print``, ``tolist``, ``.numpy()``), a host write, a collective (the process
  group copies through the host), an op no pack lowers (it runs on CPU copies), an op that runs
  as its own kernel. ``memory`` tells this module of every such use (``memory.watch``);
* ``torch.nkipy.synchronize()``, stream and event synchronisation, the end of an optimizer step;
* the graph is full (``pending.MAX_RECORDS`` records, or all sentinels of a kind used).

The numbers are per-op eager's: each node is lowered by the rule that lowers the op alone, with
the same input types, so a half-float op rounds its result as it would alone. Python numbers
(an optimizer's step size) are kernel inputs wherever the single op's rule allows it, as for
eager single-op kernels (``scalars``), so a loop's second step finds the first step's kernel:
kernels are keyed by the graph's structure (records, input layouts, which storages get results).
A region whose graph is new at every flush ``STORM`` times in a row (a loop whose structure
keeps changing) runs its queued ops one kernel each from then on (``cache_stats()
["eager_fusion_storms"]``, logged once). Random ops draw their key when queued, so they take
the device generator's stream in program order, as per-op eager does.

``NKIPY_EAGER_FUSION=0`` (``init_nkipy_backend(eager_fusion=False)``) and
``torch.use_deterministic_algorithms(True)`` run every op as its own kernel.

Counters (``nkipy_core.cache_stats()``): ``eager_flushes``, ``eager_flushed_ops``,
``eager_flush:<why>`` per reason, ``eager_fused_compiles``, ``eager_per_op:<why>`` for ops the
queue did not take. Each flush is a ``torch.profiler`` event naming its ops.
"""

from __future__ import annotations

import logging
import math
import operator
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch.optim.optimizer import register_optimizer_step_post_hook

from nkipy_core import _torch
from nkipy_core.buffers import memory
from nkipy_core.cache.bounded import BoundedCache
from nkipy_core.cache.kernel_cache import STATS
from nkipy_core.compiler import rng
from nkipy_core.compiler.aten_schema import is_view
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.compiler.kernels import compile_kernel
from nkipy_core.compiler.lower import finish_kernel, trace_subgraph
from nkipy_core.compiler.plan import RULE, choose_rule
from nkipy_core.config.settings import Config
from nkipy_core.device import aten, eager, scalars
from nkipy_core.device.pending import Decision, PendingGraph, Ref
from nkipy_core.errors import DeviceError
from nkipy_core.plugin.registry import op_name

log = logging.getLogger("nkipy.device")
aten_ops = torch.ops.aten

#: flushes in a row that found no kernel for their graph before a region runs op by op
STORM = 8
#: call signatures whose decisions are kept, and graphs whose kernels are kept
MAX_DECISIONS = 8192
MAX_GRAPHS = 256

_lock = threading.RLock()
_local = threading.local()


class _Caches:
    """What the queue keeps for one configuration (``eager.current_state()``): decisions by
    call signature, kernels by graph, and the recompile guard's counts."""

    def __init__(self, state: Any):
        self.state = state
        self.decisions: BoundedCache[tuple, Any] = BoundedCache(
            "eager_fusion_decisions", MAX_DECISIONS
        )
        self.kernels: BoundedCache[tuple, Any] = BoundedCache("eager_fusion_graphs", MAX_GRAPHS)
        #: region -> flushes in a row that compiled a new kernel
        self.misses: Counter[tuple] = Counter()
        #: regions that run op by op (see the module docstring)
        self.per_op_regions: set[tuple] = set()


_caches: _Caches | None = None


def _for(state: Any) -> _Caches:
    global _caches
    if _caches is None or _caches.state is not state:
        _caches = _Caches(state)
    return _caches


def _decide(op: Any, args: tuple, kwargs: dict) -> Decision | str:
    tensors: list[torch.Tensor] = []
    numbers: list[float | int] = []
    key = eager.call_key(op, args, kwargs, tensors, numbers)
    return _decision(op, args, kwargs, key, numbers, eager.current_state())


class _Queue:
    """What ``eager`` and ``aten`` call (``eager.queue_with``, ``aten.queue_copies_with``)."""

    @staticmethod
    def active(config: Config) -> bool:
        return (
            config.eager_fusion
            and not getattr(_local, "flushing", False)
            and not torch.are_deterministic_algorithms_enabled()
        )

    @staticmethod
    def enqueue(op: Any, args: tuple, kwargs: dict, state: Any) -> Any:
        return _enqueue(op, args, kwargs, state)

    @staticmethod
    def write(dst: torch.Tensor, src: torch.Tensor) -> bool:
        return _write(dst, src)


_graph = PendingGraph(_decide)


def install() -> None:
    """Route the device's eager ops and device copies through the queue, and run it at the end
    of every optimizer step (the device's first use)."""
    eager.queue_with(_Queue)
    aten.queue_copies_with(lambda src, dst: _write(dst, src))
    global _step_hook
    if _step_hook is None:
        _step_hook = register_optimizer_step_post_hook(_after_step)


_step_hook: Any = None


def _after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    """A step's updates are one graph, and the next step's forward starts a new one."""
    if not _graph.empty():
        flush("optimizer step")


# -- deciding --------------------------------------------------------------------------------


def _decision(
    op: Any, args: tuple, kwargs: dict, key: tuple, numbers: list, state: Any
) -> Decision | str:
    """Whether a call of ``op`` with these arguments (tensors real or meta; ``key`` and
    ``numbers`` from ``eager.call_key``) may be queued: its ``Decision``, or why not. Cached by
    call signature; kernel numbers by value where the op's rule does not take them as inputs."""
    decisions = _for(state).decisions
    found = decisions.get(key)
    if found is None:
        found = decisions[key] = _decide_now(op, args, kwargs, numbers, state)
    if isinstance(found, dict):  # numbers by value
        by_value = (*map(type, numbers), *map(repr, numbers))
        decision = found.get(by_value)
        if decision is None:
            decision = found[by_value] = _decide_now(op, args, kwargs, [], state)
        return decision
    return found


def _decide_now(
    op: Any, args: tuple, kwargs: dict, numbers: list, state: Any
) -> Decision | str | dict:
    reason = eager.host_reason(op, state.config)
    if reason is not None:
        return reason
    if any(
        isinstance(t, torch.Tensor) and (t.is_complex() or t.is_conj() or t.is_neg())
        for t in _torch.tree_leaves((args, kwargs))
    ):
        return "complex tensors and conjugate or negative views run op by op"
    layout = kwargs.get("memory_format")
    if layout not in (None, torch.contiguous_format, torch.preserve_format):
        return f"results in {layout} run op by op"
    built = eager.one_node_graph(op, args, kwargs)
    if isinstance(built, str):
        return built
    sub, node = built
    value = node.meta["val"]
    outputs = value if isinstance(value, (tuple, list)) else (value,)
    if any(t.is_complex() for t in outputs):
        return "complex results run op by op"
    random = rng.is_random(node)
    if random:
        rng.seed_eager_op(sub, node)
    rule = choose_rule(node, state.rules.rules_for(op), state.config, memory.runtime())
    if isinstance(rule, str):
        return rule
    lifted = bool(numbers)
    if lifted and not eager.lifts_numbers(op, args, kwargs, rule):
        return {}
    return Decision(
        rule,
        tuple((tuple(t.shape), t.dtype) for t in outputs),
        isinstance(value, (tuple, list)),
        random,
        lifted,
    )


# -- queueing --------------------------------------------------------------------------------


def _enqueue(op: Any, args: tuple, kwargs: dict, state: Any) -> Any:
    tensors: list[torch.Tensor] = []
    numbers: list[float | int] = []
    key = eager.call_key(op, args, kwargs, tensors, numbers)
    eager.check_devices(op, tensors)
    decision = _decision(op, args, kwargs, key, numbers, state)
    if isinstance(decision, str):
        STATS[f"eager_per_op:{op_name(op)}"] += 1
        return eager.NOT_QUEUED
    with _lock:
        graph = _graph
        lifted = numbers if decision.lifted else []
        floats = sum(type(n) is float for n in lifted)
        if not graph.has_room(floats, len(lifted) - floats):
            _flush_locked("size limit")
            graph = _graph
        if graph.empty():
            graph.region = _user_location()
            graph.owner = _for(state)
        refs = [graph.read(t) for t in tensors]
        if any(r is None for r in refs):
            STATS["eager_per_op:a storage the queue cannot read"] += 1
            return eager.NOT_QUEUED
        number_refs = [graph.number(n) for n in numbers] if decision.lifted else numbers
        args_t, kwargs_t = eager.fill_call(op, args, kwargs, iter(refs), iter(number_refs))
        if decision.random:
            kwargs_t = {
                **kwargs_t,
                rng.RNG_KWARG: graph.key(rng.key_tensor(*rng.draw(1, eager.DEVICE))),
            }
        results = graph.record(op, args_t, kwargs_t, decision)
        made = []
        for ref, (shape, dtype) in zip(results, decision.outputs):
            t = memory.pending(shape, dtype)
            graph.bind(t, ref)
            made.append(t)
        _watch()
    return tuple(made) if decision.multiple else made[0]


def _write(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Queue ``dst.copy_(src)`` (both on the device; ``src`` broadcast to ``dst``'s shape,
    cast to its dtype), or return ``False`` when the queue does not take it."""
    if not _Queue.active(eager.current_state().config):
        return False
    if any(t.is_complex() or t.is_conj() or t.is_neg() for t in (src, dst)):
        return False
    with _lock:
        graph = _graph
        if graph.owner is None:
            graph.owner = _for(eager.current_state())
        ref = graph.read(src)
        if ref is not None and src.dtype != dst.dtype:
            ref = graph.glue(aten_ops._to_copy.default, ref, dtype=dst.dtype)
        if ref is not None and tuple(src.shape) != tuple(dst.shape):
            ref = graph.glue(aten_ops.expand.default, ref, list(dst.shape))
        if ref is None or not graph.write(dst, ref):
            return False
        _watch()
    return True


#: where the device's own code and torch's are: not a user's location
_INTERNAL = (str(Path(torch.__file__).parent), str(Path(__file__).parents[1]))


def _user_location() -> tuple[str, int] | None:
    """The file and line of the user's code that called the op being queued."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def _watch() -> None:
    memory.watch(_used)


def _used(allocation: Any) -> None:
    """A storage is about to be used outside the graph: run the graph first if it touches it."""
    if allocation.address in _graph.touched and not getattr(_local, "flushing", False):
        flush("a value is used outside the queue")


# -- running ---------------------------------------------------------------------------------


def flush(why: str) -> None:
    """Run the queued ops now (``why`` is counted: ``cache_stats()["eager_flush:<why>"]``)."""
    with _lock:
        _flush_locked(why)


def _flush_locked(why: str) -> None:
    global _graph
    graph = _graph
    if graph.empty():
        return
    _graph = PendingGraph(_decide)
    memory.watch(None)
    _local.flushing = True
    try:
        STATS["eager_flushes"] += 1
        STATS[f"eager_flush:{why}"] += 1
        STATS["eager_flushed_ops"] += len(graph)
        with torch.profiler.record_function(_event_name(graph)):
            _run(graph)
    finally:
        _local.flushing = False


def _event_name(graph: PendingGraph) -> str:
    names = Counter(op_name(op) for op, _, _ in graph.records)
    shown = ", ".join(f"{n}×{c}" if c > 1 else n for n, c in names.most_common(6))
    more = len(names) - 6
    return f"nkipy_eager_flush {len(graph)} ops: {shown}" + (f", +{more} more" if more > 0 else "")


def _run(graph: PendingGraph) -> None:
    """Compute every live storage's value and give it to the storage."""
    live = []
    for value in graph.values.values():
        allocation = value.allocation()
        if allocation is not None:
            live.append((allocation, value))
    for allocation, _ in live:
        memory.release(allocation)  # the kernel's results are counted when it makes them
    outputs: list[Ref] = []
    seen: set[Ref] = set()
    for _, value in live:
        if value.ref[0] == "op" and value.ref not in seen:
            seen.add(value.ref)
            outputs.append(value.ref)
    results: dict[Ref, torch.Tensor] = {}
    if outputs:
        region = (graph.region, graph.records[0])
        if region in graph.owner.per_op_regions:
            results = _replay(graph, outputs)
        else:
            results = _fused(graph, outputs, region)
    users: dict[Ref, list] = {}
    for allocation, value in live:
        users.setdefault(value.ref, []).append((allocation, value))
    for ref, holders in users.items():
        source = graph.inputs[ref[1]] if ref[0] == "in" else results[ref]
        last_allocation, last_value = holders[-1]
        for allocation, value in holders[:-1]:
            memory.fill(allocation, value.shape, value.dtype, source)
        nbytes = math.prod(last_value.shape) * last_value.dtype.itemsize
        if ref[0] == "in" or not memory.adopt_result(last_allocation, nbytes, source):
            memory.fill(last_allocation, last_value.shape, last_value.dtype, source)


def _fused(graph: PendingGraph, outputs: list[Ref], region: tuple) -> dict[Ref, torch.Tensor]:
    kinds = tuple(type(n) for n in graph.numbers)
    key = (
        tuple(graph.records),
        tuple(graph.input_keys),
        len(graph.keys),
        kinds,
        tuple(outputs),
    )
    caches = graph.owner
    call = caches.kernels.get(key)
    if call is None:
        caches.misses[region] += 1
        if caches.misses[region] >= STORM:
            caches.per_op_regions.add(region)
            STATS["eager_fusion_storms"] += 1
            log.warning(
                "nkipy: the eager ops queued from %s make a new graph at every flush; they run "
                "one kernel per op from now on",
                "{}:{}".format(*region[0]) if region[0] else "?",
            )
            return _replay(graph, outputs)
        call = caches.kernels[key] = _compile(graph, outputs)
        STATS["eager_fused_compiles"] += 1
    else:
        caches.misses[region] = 0
    numbers = [
        torch.tensor(n, dtype=torch.float64 if type(n) is float else torch.int64)
        for n in graph.numbers
    ]
    try:
        produced = call(*graph.inputs, *graph.keys, *numbers)
    except Exception as exc:
        raise DeviceError(
            f"a fused kernel of {len(graph)} queued eager ops failed: {type(exc).__name__}: {exc}. "
            "Run with NKIPY_EAGER_FUSION=0 to see which op fails."
        ) from exc
    produced = produced if isinstance(produced, (tuple, list)) else (produced,)
    return dict(zip(outputs, produced))


def _compile(graph: PendingGraph, outputs: list[Ref]) -> KernelCall:
    """The kernel of the graph: lowered with sentinels for its numbers, then each sentinel's
    constant made a kernel input (``scalars.lift``)."""
    gm, sentinels = _fx_graph(graph, outputs)

    def lower(sub: torch.fx.GraphModule, name: str):
        kernel = trace_subgraph(sub, name)
        if sentinels:  # an op whose result is unused is gone, and its numbers with it
            kernel = scalars.lift(kernel, sentinels, every=False)
        return finish_kernel(kernel)

    config = graph.owner.state.config
    return compile_kernel(gm, "eager_fused", config, memory.runtime(), True, lower)


def _fx_graph(graph: PendingGraph, outputs: list[Ref]) -> tuple[torch.fx.GraphModule, list]:
    fx = torch.fx.Graph()
    env: dict[Ref, Any] = {}
    for i, t in enumerate(graph.inputs):
        node = env[Ref(("in", i))] = fx.placeholder(f"in{i}")
        node.meta["val"] = eager.meta_like(t)
    for i in range(len(graph.keys)):
        node = env[Ref(("key", i))] = fx.placeholder(f"key{i}")
        node.meta["val"] = torch.empty(rng.KEY_SHAPE, dtype=torch.int32, device="meta")
    counts = Counter()
    sentinels = []
    for i, n in enumerate(graph.numbers):
        sentinels.append(scalars.sentinel(counts[type(n)], 0, type(n)))
        counts[type(n)] += 1
        env[Ref(("num", i))] = sentinels[-1]

    def resolve(value):
        if type(value) is Ref:
            return env[value]
        if isinstance(value, tuple):
            return tuple(resolve(v) for v in value)
        return value

    for index, ((op, args, kwargs), decision) in enumerate(zip(graph.records, graph.decisions)):
        kw = {k: resolve(v) for k, v in kwargs}
        if rng.RNG_KWARG in kw:
            kw[rng.RNG_KWARG] = (kw[rng.RNG_KWARG], 0)
        node = fx.call_function(op, resolve(args), kw)
        node.meta[RULE] = decision.rule
        metas = [torch.empty(s, dtype=d, device="meta") for s, d in decision.outputs]
        if decision.multiple:
            node.meta["val"] = tuple(metas)
            for k, meta in enumerate(metas):
                item = env[Ref(("op", index, k))] = fx.call_function(operator.getitem, (node, k))
                item.meta["val"] = meta
        else:
            node.meta["val"] = metas[0]
            env[Ref(("op", index, 0))] = node
    fx.output(tuple(env[r] for r in outputs))
    fx.eliminate_dead_code()
    gm = torch.fx.GraphModule(torch.nn.Module(), fx)
    _torch.forget_graph_source(gm)
    return gm, sentinels


def _replay(graph: PendingGraph, outputs: list[Ref]) -> dict[Ref, torch.Tensor]:
    """Run the records one kernel each (the region's graph keeps changing)."""
    env: dict[Ref, Any] = {Ref(("in", i)): t for i, t in enumerate(graph.inputs)}
    env.update({Ref(("num", i)): n for i, n in enumerate(graph.numbers)})

    def resolve(value):
        if type(value) is Ref:
            return env[value]
        if isinstance(value, tuple):
            return tuple(resolve(v) for v in value)
        return value

    for index, (op, args, kwargs) in enumerate(graph.records):
        kw = {k: resolve(v) for k, v in kwargs if k != rng.RNG_KWARG}
        key = dict(kwargs).get(rng.RNG_KWARG)
        call_args = resolve(args)
        if key is not None:
            result = eager.run_with_key(op, call_args, kw, graph.keys[key[1]])
        elif is_view(op):
            result = op(*call_args, **kw)
        else:
            result = eager.run(op, call_args, kw)
        for k, r in enumerate(result if isinstance(result, (tuple, list)) else (result,)):
            env[Ref(("op", index, k))] = r.contiguous()  # a value is row-major (``pending``)
    return {r: env[r] for r in outputs}
