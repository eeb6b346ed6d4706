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
keeps changing) runs its queued ops one kernel each from then on (``cache_stats
["eager_fusion_storms"]``, logged once). Random ops draw their key when queued, so they take
the device generator's stream in program order, as per-op eager does.

``NKIPY_EAGER_FUSION=0`` (``init_nkipy_backend(eager_fusion=False)``) and
``torch.use_deterministic_algorithms(True)`` run every op as its own kernel.

Counters (``nkipy_core.eager_stats()``, in ``cache_stats`` and, at exit, in what ``nkipy-ops
stats`` reads): ``eager_flushes``, ``eager_flushed_ops``, ``eager_flush:<why>`` per reason,
``eager_fused_compiles``, ``eager_per_op:<op>`` for ops the queue did not take. Each flush is a
``torch.profiler`` event naming its ops.
"""

from __future__ import annotations

import functools
import logging
import math
import operator
import queue
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, cast

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

    @staticmethod
    def plan(op: Any, args: tuple, kwargs: dict, state: Any) -> Callable | None:
        return _plan(op, args, kwargs, state)


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
    """A step's updates are one graph, and the next step's forward starts a new one (the
    kernel runs while Python goes on)."""
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
    if isinstance(found, _ByValue):
        by_value = (*map(type, numbers), *map(repr, numbers))
        decision = found.get(by_value)
        if decision is None:
            decision = found[by_value] = _decide_now(op, args, kwargs, [], state)
        return cast(Decision | str, decision)
    return cast(Decision | str, found)


class _ByValue(BoundedCache):
    """Decisions of one call signature keyed by its numbers (its rule bakes them in)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("eager_fusion_values", eager.MAX_FLOAT_VALUES)


def _decide_now(
    op: Any, args: tuple, kwargs: dict, numbers: list, state: Any
) -> Decision | str | _ByValue:
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
    rule = choose_rule(node, state.rules, state.config, memory.runtime())
    if isinstance(rule, str):
        return rule
    lifted = bool(numbers)
    if lifted and not eager.lifts_numbers(op, args, kwargs, rule):
        return _ByValue()
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
    return _record(op, args, kwargs, decision, tensors, numbers, state)


def _plan(op: Any, args: tuple, kwargs: dict, state: Any) -> Callable | None:
    """How later calls of this signature (``eager._queued_key``) are queued without deciding
    again: the decision and where the call's tensors and kernel numbers are; ``None`` when the
    numbers are keyed by value."""
    tensors: list[torch.Tensor] = []
    numbers: list[float | int] = []
    key = eager.call_key(op, args, kwargs, tensors, numbers)
    decision = _decision(op, args, kwargs, key, numbers, state)
    if not isinstance(decision, Decision) or (numbers and not decision.lifted):
        return None
    slots = [*enumerate(args), *kwargs.items()]
    tensor_slots = [k for k, v in slots if isinstance(v, torch.Tensor)]
    number_slots = eager.lifted_slots(op, args, kwargs)
    if len(tensor_slots) != len(tensors) or len(number_slots) != len(numbers):
        return None  # tensors or numbers inside lists
    return functools.partial(_planned, op, decision, tensor_slots, number_slots, state)


def _planned(
    op: Any, decision: Decision, tensor_slots: list, number_slots: list, state: Any, args, kwargs
) -> Any:
    def at(slot: int | str) -> Any:
        return args[slot] if type(slot) is int else kwargs[slot]

    tensors = [at(slot) for slot in tensor_slots]
    numbers = [at(slot) for slot in number_slots]
    return _record(op, args, kwargs, decision, tensors, numbers, state)


def _record(
    op: Any,
    args: tuple,
    kwargs: dict,
    decision: Decision,
    tensors: list[torch.Tensor],
    numbers: list[float | int],
    state: Any,
) -> Any:
    """Record a call whose decision is known; its result tensors (``eager.NOT_QUEUED`` if the
    graph cannot read one of its tensors)."""
    with _lock:
        graph = _graph
        lifted = numbers if decision.lifted else []
        floats = sum(type(n) is float for n in lifted)
        if not graph.has_room(floats, len(lifted) - floats):
            _flush_locked("size limit")
            graph = _graph
        location = _user_location()
        if graph.empty():
            graph.region = location
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
        results = graph.record(op, args_t, kwargs_t, decision, location)
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
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def _watch() -> None:
    memory.watch(_used)


def _used(allocation: Any) -> None:
    """A storage is about to be used outside the queue: run the graph first if it touches it,
    and wait for the kernels in flight that do."""
    if getattr(_local, "flushing", False):
        return
    address = allocation.address
    if address in _graph.touched:
        synchronize("a value is used outside the queue")
    elif address in _worker.touched:
        _wait()


# -- running ---------------------------------------------------------------------------------


def flush(why: str) -> None:
    """Hand the queued ops to the worker as one kernel, without waiting for it (``why`` is
    counted: ``cache_stats["eager_flush:<why>"]``)."""
    with _lock:
        _flush_locked(why)


def synchronize(why: str) -> None:
    """Run the queued ops and wait for every kernel in flight; an error of one is raised here."""
    flush(why)
    _wait()


def _wait() -> None:
    _worker.wait()
    if _graph.empty():
        memory.watch(None)


def _flush_locked(why: str) -> None:
    global _graph
    graph = _graph
    if graph.empty():
        return
    _graph = PendingGraph(_decide)
    STATS["eager_flushes"] += 1
    STATS[f"eager_flush:{why}"] += 1
    STATS["eager_flushed_ops"] += len(graph)
    _local.flushing = True
    try:
        job = _job(graph)
        if _torch.profiler_enabled():  # torch's profiler records this thread, not the worker
            _worker.wait()
            job()
            return
    finally:
        _local.flushing = False
    _worker.submit(job, graph.touched)


def _event_name(graph: PendingGraph) -> str:
    names = Counter(op_name(op) for op, _, _ in graph.records)
    shown = ", ".join(f"{n}×{c}" if c > 1 else n for n, c in names.most_common(6))
    more = len(names) - 6
    return f"nkipy_eager_flush {len(graph)} ops: {shown}" + (f", +{more} more" if more > 0 else "")


def _job(graph: PendingGraph) -> Callable[[], None]:
    """What the worker runs for a graph: its kernel (compiled here, now) or its ops one by one,
    then every live storage given its value."""
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
    compute: Callable[[], dict[Ref, torch.Tensor]] = dict
    if outputs:
        region = (graph.region, graph.records[0])
        call = None if region in graph.owner.per_op_regions else _kernel_for(graph, outputs, region)
        if call is None:
            compute = functools.partial(_replay, graph, outputs)
        else:
            compute = functools.partial(_call, call, graph, outputs)
    name = _event_name(graph)

    def job() -> None:
        try:
            results = compute()
        except Exception as exc:
            raise _failure(graph, exc) from exc
        _give(graph, live, results)

    if not _torch.profiler_enabled():
        return job

    def recorded() -> None:
        with torch.profiler.record_function(name):
            job()

    return recorded


def _give(graph: PendingGraph, live: list, results: dict[Ref, torch.Tensor]) -> None:
    """Give each live storage its value: a kernel's result becomes the buffer of the last
    storage that holds it (no copy), the others get copies."""
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


def _kernel_for(graph: PendingGraph, outputs: list[Ref], region: tuple) -> KernelCall | None:
    """The graph's kernel, from memory or compiled now; ``None`` where its ops run one by one
    (a region whose graph keeps changing, see the module docstring)."""
    key = (
        tuple(graph.records),
        tuple(graph.input_keys),
        len(graph.keys),
        tuple(type(n) for n in graph.numbers),
        tuple(outputs),
    )
    caches = graph.owner
    call = caches.kernels.get(key)
    if call is not None:
        caches.misses[region] = 0
        return call
    caches.misses[region] += 1
    if caches.misses[region] >= STORM:
        caches.per_op_regions.add(region)
        STATS["eager_fusion_storms"] += 1
        log.warning(
            "nkipy: the eager ops queued from %s make a new graph at every flush; they run "
            "one kernel per op from now on",
            "{}:{}".format(*region[0]) if region[0] else "?",
        )
        return None
    call = caches.kernels[key] = _compile(graph, outputs)
    STATS["eager_fused_compiles"] += 1
    return call


def _call(call: KernelCall, graph: PendingGraph, outputs: list[Ref]) -> dict[Ref, torch.Tensor]:
    numbers = [
        torch.tensor(n, dtype=torch.float64 if type(n) is float else torch.int64)
        for n in graph.numbers
    ]
    produced = call(*graph.inputs, *graph.keys, *numbers)
    produced = produced if isinstance(produced, (tuple, list)) else (produced,)
    return dict(zip(outputs, produced))


def _failure(graph: PendingGraph, exc: Exception) -> DeviceError:
    """The error to raise for a graph whose kernel failed: the queued op that fails when the
    ops run one by one, with where the program queued it."""
    culprit = None
    try:
        _replay(graph, [])
    except Exception as per_op:  # noqa: BLE001 - the op that fails alone
        culprit = getattr(per_op, "nkipy_record", None)
        exc = per_op
    if culprit is None:
        where = "one of the queued eager ops"
    else:
        op, location = graph.records[culprit][0], graph.locations[culprit]
        where = f"{op_name(op)}, queued at " + ("{}:{}".format(*location) if location else "?")
    return DeviceError(
        f"{where} failed when the device ran it: {type(exc).__name__}: {exc}. Tensors it "
        "computes have no value; the error is raised at the first synchronisation after it."
    )


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
    counts: Counter[type] = Counter()
    sentinels = []
    for i, n in enumerate(graph.numbers):
        sentinels.append(scalars.sentinel(counts[type(n)], 0, type(n)))
        counts[type(n)] += 1
        env[Ref(("num", i))] = sentinels[-1]

    for index, ((op, args, kwargs), decision) in enumerate(zip(graph.records, graph.decisions)):
        kw = {k: _resolve(v, env) for k, v in kwargs}
        if rng.RNG_KWARG in kw:
            kw[rng.RNG_KWARG] = (kw[rng.RNG_KWARG], 0)
        node = fx.call_function(op, _resolve(args, env), kw)
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


def _resolve(value: Any, env: dict[Ref, Any]) -> Any:
    """A record's argument with its references replaced by their values in ``env``."""
    if type(value) is Ref:
        return env[value]
    if isinstance(value, tuple):
        return tuple(_resolve(v, env) for v in value)
    return value


def _replay(graph: PendingGraph, outputs: list[Ref]) -> dict[Ref, torch.Tensor]:
    """Run the records one kernel each (the region's graph keeps changing)."""
    env: dict[Ref, Any] = {Ref(("in", i)): t for i, t in enumerate(graph.inputs)}
    env.update({Ref(("num", i)): n for i, n in enumerate(graph.numbers)})

    for index, (op, args, kwargs) in enumerate(graph.records):
        kw = {k: _resolve(v, env) for k, v in kwargs if k != rng.RNG_KWARG}
        key = dict(kwargs).get(rng.RNG_KWARG)
        call_args = _resolve(args, env)
        try:
            if key is not None:
                result = eager.run_with_key(op, call_args, kw, graph.keys[key[1]])
            elif is_view(op):
                result = op(*call_args, **kw)
            else:
                result = eager.run(op, call_args, kw)
        except Exception as exc:
            exc.nkipy_record = index  # type: ignore[attr-defined]
            raise
        for k, r in enumerate(result if isinstance(result, (tuple, list)) else (result,)):
            env[Ref(("op", index, k))] = r.contiguous()  # a value is row-major (``pending``)
    return {r: env[r] for r in outputs}


class _Worker:
    """The thread that runs flushed graphs, in order, while Python queues the next ones.

    ``touched`` counts, per storage address, the submitted jobs that read or write it: a use
    of such a storage outside the queue waits for them (``_used``). Errors of jobs are kept and
    the first is raised by the next ``wait`` (noting how many more failed); the jobs after a
    failed one still run (those that read what it computes fail too: its tensors have no
    value)."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.condition = threading.Condition()
        self.pending = 0
        self.touched: Counter[int] = Counter()
        self.errors: list[BaseException] = []
        self.thread: threading.Thread | None = None

    def submit(self, job: Callable[[], None], touched: set[int]) -> None:
        with self.condition:
            self.pending += 1
            self.touched.update(touched)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._loop, name="nkipy-eager", daemon=True)
                self.thread.start()
        self.jobs.put((job, touched))

    def _loop(self) -> None:
        _local.flushing = True  # kernels read their inputs' buffers: no flush from here
        while True:
            job, touched = self.jobs.get()
            try:
                job()
            except BaseException as exc:  # noqa: BLE001 - raised by the next wait
                self.errors.append(exc)
            finally:
                job = None  # its graph holds tensors: let them go
                with self.condition:
                    for address in touched:
                        self.touched[address] -= 1
                        if not self.touched[address]:
                            del self.touched[address]
                    self.pending -= 1
                    self.condition.notify_all()

    def wait(self) -> None:
        """Wait until every submitted job is done; raise the first error since the last wait."""
        with self.condition:
            while self.pending:
                self.condition.wait()
            errors, self.errors = self.errors, []
        if errors:
            if len(errors) > 1:
                errors[0].add_note(f"{len(errors) - 1} more queued kernel(s) failed after it")
            raise errors[0]


_worker = _Worker()
