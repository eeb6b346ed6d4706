"""The FX -> kernels driver: plan which nodes lower, partition, lower, cache, compile.

``compile_graph`` takes one functional ATen graph from AOTAutograd (forward, backward or
inference) and returns a callable: the same graph in which every maximal supported subgraph
is replaced by a call to a compiled NKIPy kernel and everything else still runs as torch on CPU.
"""

from __future__ import annotations

import copy
import logging
import operator
import os
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import attrs
import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from nkipy_core.buffers import memory
from nkipy_core.cache.kernel_cache import STATS, KernelCache, digest
from nkipy_core.compiler import precompile, regions, rng
from nkipy_core.compiler.aten_schema import is_view
from nkipy_core.compiler.kernel_call import KernelCall, _inverse
from nkipy_core.compiler.lowering import GRAPH_INPUT, Layout, invoke, output_types, tensor_type
from nkipy_core.config.settings import Config, select_runtime
from nkipy_core.errors import LoweringError, Unsupported, UnsupportedOpsError, VerificationError
from nkipy_core.ir import codegen
from nkipy_core.ir.builder import KernelBuilder, Traced
from nkipy_core.ir.passes import simplify
from nkipy_core.ir.primitives import primitive
from nkipy_core.ir.printer import format_kernel
from nkipy_core.ir.types import DType, TensorType
from nkipy_core.ir.verify import verify
from nkipy_core.observe import profiling
from nkipy_core.observe.progress import CompileProgress
from nkipy_core.plugin import manager as plugins
from nkipy_core.plugin.registry import LoweringRule, op_name, source_digest
from nkipy_core.runtime.base import CompileOptions, Runtime, Signature, runs_custom_call

log = logging.getLogger("nkipy.compiler")

#: ops that stay in torch without a fallback warning: they move data or split kernels on purpose
_GLUE = {torch.ops.aten.copy_.default, regions.BOUNDARY, rng.RNG_KEY}


class FallbackWarning(UserWarning):
    """An op runs as torch on CPU because no installed pack lowers it."""


def _core_version() -> str:
    try:
        return version("nkipy-core")
    except PackageNotFoundError:
        return "unknown"


# -- planning -------------------------------------------------------------------------------


def _candidates(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [
        n
        for n in gm.graph.nodes
        if n.op == "call_function"
        and isinstance(n.target, torch._ops.OpOverload)
        and n.target not in _GLUE
    ]


def _choose_rule(
    node: torch.fx.Node, rules: list[LoweringRule], strict: bool, runtime: Runtime
) -> LoweringRule | str:
    """The first rule that accepts ``node`` (tried on a scratch kernel), or why none did.

    A rule whose lowering the runtime cannot run inside a kernel is declined (see
    ``_runtime_declines``): the node then runs as torch, and the fallback warning says why."""
    if not rules:
        return "no installed pack lowers it"
    try:
        output_types(node)
    except Unsupported as exc:
        return f"it produces {exc}"
    reasons = []
    for rule in rules:
        builder = KernelBuilder("trial")

        def lookup(arg: torch.fx.Node) -> Traced:
            return builder.param(tensor_type(arg.meta.get("val")))

        try:
            invoke(rule, node, builder, lookup)
            reason = _runtime_declines(builder, runtime)
            if reason:
                raise Unsupported(reason)
            return rule
        except Unsupported as exc:
            reasons.append(f"{rule.qualname} declined: {exc}")
        except VerificationError:
            raise
        except Exception as exc:  # noqa: BLE001 - a buggy rule falls back loudly, not fatally
            if strict:
                raise LoweringError(
                    f"lowering rule {rule.describe()} raised on {op_name(node.target)} (node "
                    f"{node.name}): {type(exc).__name__}: {exc}"
                ) from exc
            reasons.append(f"{rule.qualname} raised {type(exc).__name__}: {exc}")
    return "; ".join(reasons)


def _runtime_declines(builder: KernelBuilder, runtime: Runtime) -> str:
    """Why ``runtime`` cannot run what ``builder`` holds inside a kernel ("" if it can).

    Collectives need a runtime that runs them between processes (``kernel_collectives``): one
    that cannot would compute each rank's part alone, silently wrong. Custom calls need a runtime
    that runs their host function or whose compiler knows their target."""
    if not getattr(runtime, "kernel_collectives", False) and any(
        primitive(name).collective for name in builder.primitives()
    ):
        return f"the {runtime.name} runtime runs no collectives inside kernels"
    unknown = sorted(t for t in builder.custom_call_targets() if not runs_custom_call(runtime, t))
    if unknown:
        return f"the {runtime.name} runtime runs no custom calls to {', '.join(unknown)} inside kernels"
    return ""


def _versions_key() -> str:
    """The installed plugin distributions and versions, and the core's own sources (its
    primitives and codegen define what a kernel computes): part of every cache key."""
    providers = sorted(f"{s.name}={s.provenance}" for s in plugins.get().statuses if s.ok)
    return digest(
        "versions", _core_version(), source_digest("nkipy_core"), torch.__version__, *providers
    )


def _placeholder_key(node: torch.fx.Node) -> str:
    """A graph input as a cache key sees it: its fake tensor, and its layout, which rules may
    read (``LoweringContext.layouts``) and which shapes alone do not determine."""
    val = node.meta.get("val")
    layout = Layout.of(val)
    return f"{val}" if layout is None else f"{val}/{layout.stride}+{layout.storage_offset}"


def _plan_key(gm: torch.fx.GraphModule, registry, runtime_name: str) -> str:
    metas = [_placeholder_key(n) for n in gm.graph.nodes if n.op == "placeholder"]
    rules = sorted({r.fingerprint for n in _candidates(gm) for r in registry.rules_for(n.target)})
    return digest("plan", gm.code, *metas, *rules, _versions_key(), runtime_name)


def plan(
    gm: torch.fx.GraphModule, config: Config, cache: KernelCache, runtime: Runtime
) -> dict[str, LoweringRule | str]:
    """Node name -> chosen rule, or the reason it falls back; cached by graph so warm runs skip rules."""
    registry = plugins.get(strict=config.strict).lowerings
    key = _plan_key(gm, registry, runtime.name)
    nodes = _candidates(gm)
    cached = _restore_plan(cache.get_index(key), nodes, registry)
    if cached is not None:
        log.debug(
            "plan of a graph of %d op(s) for %s reused from the cache", len(nodes), runtime.name
        )
        return cached
    decisions = {
        n.name: _choose_rule(n, registry.rules_for(n.target), config.strict, runtime) for n in nodes
    }
    _wait_where_the_collective_runs(nodes, decisions)
    lowered = sum(isinstance(d, LoweringRule) for d in decisions.values())
    log.debug(
        "planned a graph for %s: %d op(s) lowered, %d on CPU",
        runtime.name,
        lowered,
        len(nodes) - lowered,
    )
    STATS["planned_nodes"] += len(nodes)
    cache.put_index(key, _encode_plan(decisions))
    return decisions


#: torch's op that completes an asynchronous functional collective
_WAIT_TENSOR = "_c10d_functional::wait_tensor"


def _wait_where_the_collective_runs(
    nodes: list[torch.fx.Node], decisions: dict[str, LoweringRule | str]
) -> None:
    """``wait_tensor`` completes the asynchronous collective that produced its argument. Lowered
    it is the identity, which is right only in the kernel that holds the collective: when the
    collective runs outside (through torch.distributed), so must its wait, or the kernel would
    read the tensor before the collective has written it."""
    for node in nodes:
        # fx types a target loosely: these call_function nodes call OpOverloads
        if node.target.name() == _WAIT_TENSOR and isinstance(decisions[node.name], LoweringRule):  # type: ignore[union-attr]
            producer = node.args[0]
            if not isinstance(decisions.get(getattr(producer, "name", "")), LoweringRule):
                decisions[node.name] = "it waits on a collective that runs outside the kernel"


def _encode_plan(decisions: dict[str, LoweringRule | str]) -> dict[str, str]:
    return {
        k: ("rule:" + v.fingerprint if isinstance(v, LoweringRule) else v)
        for k, v in decisions.items()
    }


def _restore_plan(
    stored: dict[str, str] | None, nodes, registry
) -> dict[str, LoweringRule | str] | None:
    """A cached plan with rule names resolved to the installed rules; ``None`` if any is gone."""
    if stored is None:
        return None
    decisions: dict[str, LoweringRule | str] = {}
    for node in nodes:
        choice = stored.get(node.name)
        if choice is None:
            return None
        if choice.startswith("rule:"):
            rule = next(
                (r for r in registry.rules_for(node.target) if r.fingerprint == choice[5:]), None
            )
            if rule is None:
                return None
            decisions[node.name] = rule
        else:
            decisions[node.name] = choice
    return decisions


def _fallbacks(gm: torch.fx.GraphModule, decisions: dict[str, Any]) -> dict[str, str]:
    """Op name -> why it runs on CPU, for each op left on CPU (glue ops and ``getitem`` excepted)."""
    fallbacks: dict[str, str] = {}
    for node in gm.graph.nodes:
        decision = decisions.get(node.name)
        if isinstance(decision, str):
            fallbacks.setdefault(op_name(node.target), decision)
        elif node.op == "call_function" and not isinstance(node.target, torch._ops.OpOverload):
            if node.target not in (operator.getitem, regions.run_on_cpu):
                fallbacks.setdefault(
                    getattr(node.target, "__name__", str(node.target)), "not an ATen op"
                )
    return fallbacks


def report_fallbacks(fallbacks: dict[str, str], strict: bool) -> None:
    """One warning per op left on CPU (``_fallbacks``); strict: one error. A graph rebuilt from
    torch's AOTAutograd cache (``nkipy_core.dynamo.stored_graph``) reports its fallbacks here too."""
    if not fallbacks:
        return
    if strict:
        raise UnsupportedOpsError(f"{op} ({why})" for op, why in fallbacks.items())
    for op, why in fallbacks.items():
        STATS["fallback_ops"] += 1
        log.info("fallback: %s runs on CPU: %s", op, why)
        warnings.warn(f"nkipy: {op} runs on CPU: {why}", FallbackWarning, stacklevel=2)


# -- partitioning and lowering ----------------------------------------------------------------


#: node.meta key holding the rule chosen for a node; meta travels with nodes into fused subgraphs
RULE = "nkipy_rule"

#: ``GraphModule.meta`` key of a graph ``compile_graph`` returned: its ``_fallbacks``, which a
#: process rebuilding the graph from torch's AOTAutograd cache reports again
FALLBACKS = "nkipy_fallbacks"


class _Support(OperatorSupportBase):
    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node.target is operator.getitem:  # a result of a lowered multi-output op
            producer = node.args[0]
            return isinstance(producer, torch.fx.Node) and RULE in producer.meta
        return RULE in node.meta


def output_orders(sub: torch.fx.GraphModule) -> tuple[tuple[int, ...] | None, ...]:
    """Per output of a fused subgraph: the order of its dimensions from outermost to innermost in
    memory, when its example value is a dense layout other than row-major (a transposed weight
    saved for backward); else ``None``.

    The kernel returns such an output with its dimensions in that order, row-major, and the call
    permutes it back: a view with the strides torch (and AOTAutograd's guards and
    specialisations) expect, whatever layout the runtime gives its results.
    """
    result = next(iter(sub.graph.find_nodes(op="output"))).args[0]
    return tuple(
        _dense_order(n.meta.get("val"))
        for n in (result if isinstance(result, (tuple, list)) else [result])
    )


def _dense_order(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, torch.Tensor) or value.is_contiguous() or value.storage_offset() != 0:
        return None
    strides, sizes = value.stride(), value.shape
    order = tuple(sorted(range(value.dim()), key=lambda d: (-strides[d], d)))
    permuted = torch.empty([sizes[d] for d in order], device="meta").permute(_inverse(order))
    if any(n > 1 and a != b for n, a, b in zip(sizes, permuted.stride(), strides)):
        return None  # overlapping or with gaps: not a permutation of a dense layout
    return order


def lower_subgraph(sub: torch.fx.GraphModule, name: str):
    """Trace the rules of a fused subgraph into one NKIPy kernel (verified and simplified)."""
    return finish_kernel(trace_subgraph(sub, name))


def finish_kernel(kernel):
    """Simplify a traced kernel and verify the result."""
    STATS["lowered_kernels"] += 1
    kernel = simplify(kernel)
    verify(kernel)
    return kernel


def trace_subgraph(sub: torch.fx.GraphModule, name: str):
    """The kernel the rules of ``sub`` record, verified but not yet simplified."""
    builder = KernelBuilder(name)
    env: dict[torch.fx.Node, Any] = {}
    outputs: list[Traced] = []
    for node in sub.graph.nodes:
        if node.op == "placeholder":
            env[node] = builder.param(tensor_type(node.meta["val"]))
        elif node.op == "call_function" and node.target is operator.getitem:
            env[node] = env[node.args[0]][node.args[1]]
        elif node.op == "call_function":
            env[node] = invoke(node.meta[RULE], node, builder, env.__getitem__)
        elif node.op == "output":
            result = node.args[0]
            nodes = list(result) if isinstance(result, (tuple, list)) else [result]
            outputs = [env[o] for o in nodes]
        else:
            raise LoweringError(f"unexpected {node.op} node {node.name} in a fused subgraph")
    with builder.building("output layout"):
        outputs = [
            o if order is None else builder.emit("transpose", [o], {"perm": order})
            for o, order in zip(outputs, output_orders(sub))
        ]
    kernel = builder.finish(outputs)
    verify(kernel)
    return kernel


def _subgraph_key(sub: torch.fx.GraphModule, base: str) -> str:
    metas = [
        f"{tensor_type(n.meta['val'])}/{_placeholder_key(n)}"
        for n in sub.graph.nodes
        if n.op == "placeholder"
    ]
    rules = [n.meta[RULE].fingerprint for n in sub.graph.nodes if RULE in n.meta]
    return digest("subgraph", base, sub.code, *metas, *rules)


def _runtime_tag(runtime, options: CompileOptions) -> str:
    """What the runtime says its artifacts depend on beyond the IR (its hardware target)."""
    cache_tag = getattr(runtime, "cache_tag", None)
    return cache_tag(options) if cache_tag is not None else ""


@attrs.frozen
class _Lowered:
    """A kernel lowered because the cache lacks it: everything its compile and entry need."""

    name: str
    sub: torch.fx.GraphModule
    kernel: Any
    kernel_key: str
    fx_key: str
    options: CompileOptions
    tuple_output: bool
    devices: list[bool]
    orders: tuple[tuple[int, ...] | None, ...]


def _find_or_lower(
    sub: torch.fx.GraphModule,
    name: str,
    config: Config,
    runtime,
    on_device: bool | None,
    lower,
) -> KernelCall | _Lowered:
    """The kernel's call rebuilt from the cache (through the fx index without lowering, or by
    its kernel key after lowering), else the lowered kernel still to compile."""
    cache = KernelCache(config.nkipy_cache)
    options = compile_options(config)
    tag = _runtime_tag(runtime, options)
    base_key = digest(_versions_key(), runtime.name, tag, config.additional_compiler_args)
    fx_key = _subgraph_key(sub, base_key)
    result = next(iter(sub.graph.find_nodes(op="output"))).args[0]
    tuple_output = isinstance(result, (tuple, list))
    results = result if tuple_output else [result]
    orders = output_orders(sub)
    if on_device is None:
        devices = [memory.is_nkipy(n.meta.get("val")) for n in results]
    else:
        devices = [on_device] * len(results)
    indexed = cache.get_index(fx_key)
    if indexed is not None:
        call = load_kernel(
            cache, indexed["kernel"], name, runtime, options, tuple_output, devices, orders
        )
        if call is not None:
            return call
    kernel = lower(sub, name)
    ir_text = format_kernel(kernel, with_origin=False)
    kernel_key = digest(
        "kernel", ir_text, runtime.name, tag, options.compiler_args, _versions_key()
    )
    loaded = cache.load(kernel_key)
    if loaded is None:
        return _Lowered(
            name, sub, kernel, kernel_key, fx_key, options, tuple_output, devices, orders
        )
    executable = runtime.load(loaded[1], Signature.of(kernel), options)
    cache.put_index(fx_key, {"kernel": kernel_key})
    log.debug("kernel %s lowered to cache entry %s, which holds it compiled", name, kernel_key)
    stats = profiling.record(
        cache.root, kernel_key, name, profiling.op_counts(kernel), executable.signature
    )
    return KernelCall(name, executable, runtime, tuple_output, kernel_key, devices, orders, stats)


def load_kernel(
    cache: KernelCache,
    key: str,
    name: str,
    runtime,
    options: CompileOptions,
    tuple_output: bool,
    devices: Sequence[bool],
    orders: Sequence[tuple[int, ...] | None],
    count_miss: bool = True,
) -> KernelCall | None:
    """The call of kernel ``key`` (named ``name``) made from its cache entry, without lowering;
    ``None`` when the entry is missing or corrupt (``KernelCache.load``; ``count_miss`` as there).
    The entry's metadata gives the signature, so only how the call places its outputs
    (``tuple_output``, ``devices``, ``orders``) must come from the caller."""
    loaded = cache.load(key, count_miss=count_miss)
    if loaded is None:
        return None
    meta, artifacts = loaded
    signature = Signature(
        [_parse_type(t) for t in meta["inputs"]], [_parse_type(t) for t in meta["outputs"]]
    )
    executable = runtime.load(artifacts, signature, options)
    log.debug("kernel %s loaded from cache entry %s without lowering", name, key)
    stats = profiling.record(cache.root, key, name, meta.get("ops", {}), signature)
    return KernelCall(name, executable, runtime, tuple_output, key, devices, orders, stats)


def compile_options(config: Config) -> CompileOptions:
    """What a runtime compiles and loads a kernel with, from the configuration."""
    return CompileOptions(
        config.additional_compiler_args, config.rank, config.world_size, config.target
    )


def _compile_lowered(job: _Lowered, config: Config, runtime) -> tuple[KernelCall, float | None]:
    """Compile a lowered kernel, store its cache entry and index it; the call and compile seconds.

    The compile and store hold the kernel's compile lock, so ranks sharing the cache compile it
    once: a rank that waited for another's compile loads that entry instead, and its seconds are
    ``None``. Safe to run in a worker thread (the cache writes are atomic, the counters are the
    caller's)."""
    cache = KernelCache(config.nkipy_cache)
    seconds = None
    ops = profiling.op_counts(job.kernel)
    with cache.compile_lock(job.kernel_key):
        stored = cache.load(job.kernel_key, count_miss=False)
        if stored is not None:
            executable = runtime.load(stored[1], Signature.of(job.kernel), job.options)
            log.info(
                "kernel %s was compiled by another process while this one waited; loaded it",
                job.name,
            )
        else:
            start = time.monotonic()
            executable = runtime.compile(job.kernel, job.options)
            seconds = time.monotonic() - start
            cache.store(
                job.kernel_key,
                _entry_files(job),
                executable.artifacts(),
                _entry_meta(job, runtime, seconds),
            )
            log.info(
                "compiled kernel %s (%s) for %s in %.2f s into cache entry %s",
                job.name,
                profiling.op_summary(ops),
                runtime.name,
                seconds,
                job.kernel_key,
            )
    cache.put_index(job.fx_key, {"kernel": job.kernel_key})
    stats = profiling.record(cache.root, job.kernel_key, job.name, ops, executable.signature)
    call = KernelCall(
        job.name,
        executable,
        runtime,
        job.tuple_output,
        job.kernel_key,
        job.devices,
        job.orders,
        stats,
    )
    return call, seconds


def _entry_files(job: _Lowered) -> dict[str, bytes]:
    return {
        "graph.py": job.sub.code.encode(),
        "kernel.py": codegen.generate(job.kernel).encode(),
        "kernel.ir": format_kernel(job.kernel).encode(),
    }


def _entry_meta(job: _Lowered, runtime, seconds: float) -> dict[str, Any]:
    kernel = job.kernel
    return {
        "name": job.name,
        "runtime": runtime.name,
        "compiler_args": job.options.compiler_args,
        "nkipy_core": _core_version(),
        "inputs": [str(t) for t in kernel.input_types],
        "outputs": [str(t) for t in kernel.output_types],
        "ir_sha256": digest(format_kernel(kernel, with_origin=False)),
        "ops": profiling.op_counts(kernel),
        "compile_seconds": round(seconds, 3),
    }


def _count_compile(seconds: float | None) -> None:
    STATS["compiled_kernels" if seconds is not None else "waited_for_other_process"] += 1


def compile_kernel(
    sub: torch.fx.GraphModule,
    name: str,
    config: Config,
    runtime,
    on_device: bool | None = None,
    lower=lower_subgraph,
) -> KernelCall:
    """Lower (with ``lower``), compile and cache one supported subgraph (each node's rule in
    ``node.meta[RULE]``).

    Outputs land on the ``nkipy`` device when ``on_device`` says so, else where the graph's
    example values were (the inputs' device for graphs traced by dynamo).
    """
    found = _find_or_lower(sub, name, config, runtime, on_device, lower)
    if isinstance(found, KernelCall):
        return found
    call, seconds = _compile_lowered(found, config, runtime)
    _count_compile(seconds)
    return call


def compile_kernels(
    subs: Sequence[tuple[str, torch.fx.GraphModule]],
    config: Config,
    runtime,
    report: precompile.Report | None = None,
) -> list[KernelCall | None]:
    """``compile_kernel`` for the subgraphs of one graph, calls in the order given.

    Lowering and cache lookups run in this thread, one kernel after the other; the compiles the
    cache misses run on up to ``os.cpu_count()`` threads when the runtime sets
    ``parallel_compile`` (its compiler is a subprocess), else here. With a ``report`` (ahead-of-time
    compiles), a kernel that fails is recorded there and its call is ``None`` instead of raising.
    """
    found: list[KernelCall | _Lowered | None] = []
    for name, sub in subs:
        try:
            found.append(_find_or_lower(sub, name, config, runtime, None, lower_subgraph))
        except Exception as exc:  # noqa: BLE001 - precompile records every failure and goes on
            if report is None:
                raise
            report.record_failed(name, exc)
            found.append(None)
    pending = [f for f in found if isinstance(f, _Lowered)]
    if report is not None:
        for _ in range(sum(isinstance(f, KernelCall) for f in found)):
            report.record_cached()
    workers = (
        min(len(pending), os.cpu_count() or 1) if getattr(runtime, "parallel_compile", False) else 1
    )

    with CompileProgress(len(pending), runtime.name) as progress:

        def compile_one(job: _Lowered) -> tuple[KernelCall, float | None] | None:
            try:
                return _compile_lowered(job, config, runtime)
            except Exception as exc:  # noqa: BLE001 - as above
                if report is None:
                    raise
                report.record_failed(job.name, exc)
                return None
            finally:
                progress.done()

        if workers > 1:
            with ThreadPoolExecutor(workers, thread_name_prefix="nkipy-compile") as pool:
                outcomes = list(pool.map(compile_one, pending))
        else:
            outcomes = [compile_one(job) for job in pending]
    compiled: list[KernelCall | None] = []
    for outcome in outcomes:
        if outcome is None:
            compiled.append(None)
            continue
        call, seconds = outcome
        _count_compile(seconds)
        if report is not None:
            if seconds is None:
                report.record_cached()
            else:
                report.record_compiled(seconds)
        compiled.append(call)
    done = iter(compiled)
    return [next(done) if isinstance(f, _Lowered) else f for f in found]


def _parse_type(text: str) -> TensorType:
    dtype, dims = text[:-1].split("[")
    return TensorType(tuple(int(d) for d in dims.split("x") if d), DType(dtype))


def _written_argument(node: torch.fx.Node) -> torch.fx.Node | None:
    """The argument an ``out=`` or in-place node writes and returns (``atan2.out``'s ``out``,
    ``add_``'s ``self``), if it writes exactly one and returns it; else ``None``."""
    if (
        node.op != "call_function"
        or not isinstance(node.target, torch._ops.OpOverload)
        or node.target in _GLUE
    ):
        return None
    schema = node.target._schema
    written = [
        (i, a)
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ]
    if len(written) != 1 or len(schema.returns) != 1 or schema.returns[0].alias_info is None:
        return None
    ((index, argument),) = written
    value = node.kwargs.get(argument.name, node.args[index] if index < len(node.args) else None)
    return value if isinstance(value, torch.fx.Node) else None


def functionalize_writes(gm: torch.fx.GraphModule) -> None:
    """Make a node that writes an argument (``out=``, in-place) the value its later readers read.

    A kernel computes values; it cannot write into one of its inputs. Graphs from AOTAutograd are
    already functional, but a graph handed over otherwise may hold ``atan2(a, b, out=o)``: every
    later use of ``o`` then reads the node instead, and a graph input written this way gets the
    final value copied back (``copy_``, which stays in torch) before the graph returns.
    """
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    output = next(n for n in gm.graph.nodes if n.op == "output")
    latest: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in list(gm.graph.nodes):
        target = _written_argument(node)
        if target is None:
            continue
        base = next((b for b, v in latest.items() if v is target), target)
        later = order[node]
        target.replace_all_uses_with(node, delete_user_cb=lambda user: order.get(user, -1) > later)
        latest[base] = node
    for base, value in latest.items():
        if base.op == "placeholder":
            with gm.graph.inserting_before(output):
                gm.graph.call_function(torch.ops.aten.copy_.default, (base, value))


def compile_graph(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], config: Config
) -> torch.fx.GraphModule:
    """Replace every maximal supported subgraph of ``gm`` by a compiled kernel call.

    With ``config.precompile`` naming another runtime, a copy of the graph is also lowered for
    that runtime, as its own process will lower it (graph passes and plans depend on the
    runtime: a collective or custom call it cannot run stays outside its kernels), and those
    kernels are compiled into the cache for it."""
    runtime = select_runtime(config)
    cache = KernelCache(config.nkipy_cache)
    if config.precompile and config.precompile != runtime.name:
        twin = torch.fx.GraphModule(
            gm, copy.deepcopy(gm.graph)
        )  # node metas are shared, not copied
        target = precompile.target_runtime(config.precompile, config.strict)
        _lower(twin, config, target, cache, precompile.REPORT)
    return _lower(gm, config, runtime, cache)


def _lower(
    gm: torch.fx.GraphModule,
    config: Config,
    runtime: Runtime,
    cache: KernelCache,
    report: precompile.Report | None = None,
) -> torch.fx.GraphModule:
    """``compile_graph`` for one runtime; with a precompile ``report`` it compiles for another
    process, so it does not warn about fallbacks (that process will)."""
    loaded = plugins.get(strict=config.strict)
    for passes in loaded.manager.hook.nkipy_graph_passes(stage="aten", runtime=runtime):
        for graph_pass in passes or ():
            graph_pass(gm)
    functionalize_writes(gm)
    for node in gm.graph.nodes:
        if node.op == "call_function" and regions.in_cpu_region(node) and not is_view(node.target):
            node.args = (node.target, *node.args)
            node.target = regions.run_on_cpu
    rng.seed_random_ops(gm, config.fallback_random)
    for node in gm.graph.find_nodes(op="placeholder"):
        node.meta[GRAPH_INPUT] = True
    gm.graph.lint()
    gm.recompile()
    decisions = plan(
        gm, config, cache, runtime
    )  # cached under the runtime's name: its process finds it
    rng.unseed_fallbacks(gm, {n for n, d in decisions.items() if isinstance(d, LoweringRule)})
    fallbacks = _fallbacks(gm, decisions)
    if report is None:
        report_fallbacks(fallbacks, config.strict)
    if not any(isinstance(d, LoweringRule) for d in decisions.values()):
        gm.meta[FALLBACKS] = fallbacks
        return gm
    for node in gm.graph.nodes:
        if isinstance(decisions.get(node.name), LoweringRule):
            node.meta[RULE] = decisions[node.name]
    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions(), prefix="nkipy_kernel_")
    subs = [
        (node.target, getattr(fused, node.target))
        for node in fused.graph.nodes
        if node.op == "call_module" and node.target.startswith("nkipy_kernel_")
    ]
    for (name, _), call in zip(subs, compile_kernels(subs, config, runtime, report)):
        setattr(fused, name, call)
    fused.recompile()
    fused.meta[FALLBACKS] = fallbacks
    log.info(
        "compiled a graph into %d kernel(s)",
        sum(isinstance(m, KernelCall) for m in fused.children()),
    )
    return fused
