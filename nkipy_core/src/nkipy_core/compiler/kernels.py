"""Kernels: a lowered subgraph found in or stored into the kernel cache, compiled and loaded by
the runtime (compiles in parallel when its compiler is a subprocess), and wrapped in the
``KernelCall`` that stands in for the subgraph.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import torch
import torch.fx

from nkipy_core.buffers import memory
from nkipy_core.cache import keys
from nkipy_core.cache.kernel_cache import STATS, KernelCache
from nkipy_core.compiler import manifest, precompile
from nkipy_core.compiler.kernel_call import PLAIN, Boundary, KernelCall
from nkipy_core.compiler.key_parts import core_version, placeholder_key, runtime_tag, versions_key
from nkipy_core.compiler.lower import input_orders, lower_subgraph, output_orders
from nkipy_core.compiler.lowering import tensor_type
from nkipy_core.compiler.plan import RULE
from nkipy_core.config.settings import Config
from nkipy_core.errors import VerificationError
from nkipy_core.ir import codegen
from nkipy_core.ir.printer import format_kernel
from nkipy_core.ir.types import DType, TensorType
from nkipy_core.observe import profiling
from nkipy_core.observe.progress import CompileProgress
from nkipy_core.runtime.base import CompileOptions, Signature

log = logging.getLogger("nkipy.compiler")


def _subgraph_key(sub: torch.fx.GraphModule, base: str) -> str:
    metas = [
        f"{tensor_type(n.meta['val'])}/{placeholder_key(n)}"
        for n in sub.graph.nodes
        if n.op == "placeholder"
    ]
    rules = [n.meta[RULE].fingerprint for n in sub.graph.nodes if RULE in n.meta]
    return keys.fx_key(base, sub.code, metas, rules)


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
    boundary: Boundary


def _val(node: Any) -> Any:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def boundary_of(sub: torch.fx.GraphModule) -> Boundary:
    """Where the torch values of a subgraph's inputs and outputs are not the kernel's arrays
    (complex tensors, math bits), from their example values."""
    result = next(iter(sub.graph.find_nodes(op="output"))).args[0]
    results = result if isinstance(result, (tuple, list)) else [result]
    inputs = [_val(n) for n in sub.graph.find_nodes(op="placeholder")]
    orders = input_orders(sub)
    return Boundary(
        complex_inputs=any(v is not None and v.is_complex() for v in inputs),
        complex_outputs=tuple((v := _val(n)) is not None and v.is_complex() for n in results),
        resolved_inputs=tuple(
            i for i, v in enumerate(inputs) if v is not None and (v.is_conj() or v.is_neg())
        ),
        input_orders=orders if any(o is not None for o in orders) else (),
    )


def _fx_key(sub: torch.fx.GraphModule, config: Config, runtime) -> str:
    """The FX index key of a subgraph under ``config`` for ``runtime``."""
    tag = runtime_tag(runtime, config.compile_options())
    base_key = keys.fx_base(versions_key(), runtime.name, tag, config.additional_compiler_args)
    return _subgraph_key(sub, base_key)


def _find_or_lower(
    sub: torch.fx.GraphModule,
    name: str,
    config: Config,
    runtime,
    on_device: bool | None,
    lower,
    fx_key: str,
) -> KernelCall | _Lowered:
    """The kernel's call rebuilt from the cache (through the fx index without lowering, or by
    its kernel key after lowering), else the lowered kernel still to compile."""
    cache = KernelCache(config.nkipy_cache)
    options = config.compile_options()
    tag = runtime_tag(runtime, options)
    result = next(iter(sub.graph.find_nodes(op="output"))).args[0]
    tuple_output = isinstance(result, (tuple, list))
    results = result if tuple_output else [result]
    orders = output_orders(sub)
    boundary = boundary_of(sub)
    if on_device is None:
        devices = [memory.is_nkipy(n.meta.get("val")) for n in results]
    else:
        devices = [on_device] * len(results)
    indexed = None if manifest.recording() else cache.get_index(fx_key)
    if indexed is not None:
        call = load_kernel(
            cache,
            indexed["kernel"],
            name,
            runtime,
            options,
            tuple_output,
            devices,
            orders,
            boundary=boundary,
        )
        if call is not None:
            return call
    kernel = lower(sub, name)
    manifest.RECORDER.note(kernel, name)
    ir_text = format_kernel(kernel, with_origin=False)
    kernel_key = keys.kernel_key(ir_text, runtime.name, tag, options.compiler_args, versions_key())
    loaded = cache.load(kernel_key)
    executable = (
        None
        if loaded is None
        else _load_executable(cache, kernel_key, runtime, loaded[1], Signature.of(kernel), options)
    )
    if executable is None:
        return _Lowered(
            name,
            sub,
            kernel,
            kernel_key,
            fx_key,
            options,
            tuple_output,
            devices,
            orders,
            boundary,
        )
    cache.put_index(fx_key, {"kernel": kernel_key})
    log.debug("kernel %s lowered to cache entry %s, which holds it compiled", name, kernel_key)
    stats = profiling.record(
        cache.root, kernel_key, name, profiling.op_counts(kernel), executable.signature
    )
    return KernelCall(
        name,
        executable,
        runtime,
        tuple_output,
        kernel_key,
        devices,
        orders,
        stats,
        boundary,
    )


def _load_executable(
    cache: KernelCache,
    key: str,
    runtime,
    artifacts: dict[str, bytes],
    signature: Signature,
    options: CompileOptions,
) -> Any | None:
    """The runtime's executable of a cache entry; ``None``, the entry counted as corrupt and
    removed, when the runtime refuses its artifacts (the ``cpu`` runtime parses its IR, strictly):
    an entry that passes its checks but is not a kernel is compiled again, never an error."""
    try:
        return runtime.load(artifacts, signature, options)
    except VerificationError as exc:
        log.warning("nkipy cache: entry %s does not load (%s); rebuilding it", key, exc)
        STATS["corrupt"] += 1
        cache.remove(key)
        return None


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
    boundary: Boundary = PLAIN,
) -> KernelCall | None:
    """The call of kernel ``key`` (named ``name``) made from its cache entry, without lowering;
    ``None`` when the entry is missing or corrupt (``KernelCache.load``; ``count_miss`` as there).
    The entry's metadata gives the signature, so only how the call places its outputs
    (``tuple_output``, ``devices``, ``orders``) and where its torch values are not its arrays
    (``boundary``) must come from the caller."""
    loaded = cache.load(key, count_miss=count_miss)
    if loaded is None:
        return None
    meta, artifacts = loaded
    signature = Signature(
        [_parse_type(t) for t in meta["inputs"]], [_parse_type(t) for t in meta["outputs"]]
    )
    executable = _load_executable(cache, key, runtime, artifacts, signature, options)
    if executable is None:
        return None
    log.debug("kernel %s loaded from cache entry %s without lowering", name, key)
    stats = profiling.record(cache.root, key, name, meta.get("ops", {}), signature)
    return KernelCall(
        name,
        executable,
        runtime,
        tuple_output,
        key,
        devices,
        orders,
        stats,
        boundary,
    )


def _compile_lowered(job: _Lowered, config: Config, runtime) -> tuple[KernelCall, float | None]:
    """Compile a lowered kernel, store its cache entry and index it; the call and compile seconds
    (``None`` when another process compiled it meanwhile, see ``compile_into_cache``).

    A kernel the cache could not store (read-only, full disk) is not indexed either: an index
    entry would only send the next process to an entry that is not there."""
    cache = KernelCache(config.nkipy_cache)
    files = {"graph.py": job.sub.code.encode()}
    executable, seconds, in_cache = compile_into_cache(
        cache, job.kernel, job.kernel_key, job.name, job.options, runtime, files
    )
    if in_cache:
        cache.put_index(job.fx_key, {"kernel": job.kernel_key})
    ops = profiling.op_counts(job.kernel)
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
        job.boundary,
    )
    return call, seconds


def compile_into_cache(
    cache: KernelCache,
    kernel: Any,
    kernel_key: str,
    name: str,
    options: CompileOptions,
    runtime,
    files: dict[str, bytes],
) -> tuple[Any, float | None, bool]:
    """(executable, compile seconds, whether it is in the cache) of a lowered kernel, compiled
    and stored unless another process did it first.

    The compile and store hold the kernel's compile lock, so ranks sharing the cache compile it
    once: a rank that waited for another's compile loads that entry instead, and its seconds are
    ``None``. Safe to run in a worker thread (the cache writes are atomic, the counters are the
    caller's). ``files``: what the entry holds for people beside the kernel's IR and code."""
    seconds = None
    with cache.compile_lock(kernel_key):
        stored = cache.load(kernel_key, count_miss=False)
        executable = (
            None
            if stored is None
            else _load_executable(
                cache, kernel_key, runtime, stored[1], Signature.of(kernel), options
            )
        )
        in_cache = executable is not None
        if executable is not None:
            log.info(
                "kernel %s was compiled by another process while this one waited; loaded it",
                name,
            )
        else:
            ir_text = format_kernel(kernel, with_origin=False)
            manifest.check_compiled(ir_text, name)
            start = time.monotonic()
            executable = runtime.compile(kernel, options)
            seconds = time.monotonic() - start
            in_cache = (
                cache.store(
                    kernel_key,
                    {**files, **_entry_files(kernel)},
                    executable.artifacts(),
                    _entry_meta(kernel, name, ir_text, runtime, options, seconds),
                )
                is not None
            )
            log.info(
                "compiled kernel %s (%s) for %s in %.2f s into cache entry %s",
                name,
                profiling.op_summary(profiling.op_counts(kernel)),
                runtime.name,
                seconds,
                kernel_key,
            )
    return executable, seconds, in_cache


def _entry_files(kernel: Any) -> dict[str, bytes]:
    """The files of a cache entry beside the runtime's artifacts, for people: the kernel as NumPy
    source (``kernel.py``, runnable on its own but never executed by nkipy) and its IR with
    origins."""
    return {
        "kernel.py": codegen.generate(kernel).encode(),
        "kernel.ir": format_kernel(kernel).encode(),
    }


def _entry_meta(
    kernel: Any, name: str, ir_text: str, runtime, options: CompileOptions, seconds: float
) -> dict[str, Any]:
    return {
        "name": name,
        "runtime": runtime.name,
        "compiler_args": options.compiler_args,
        "nkipy_core": core_version(),
        "inputs": [str(t) for t in kernel.input_types],
        "outputs": [str(t) for t in kernel.output_types],
        "ir_sha256": keys.digest(ir_text),
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
    found = _find_or_lower(
        sub, name, config, runtime, on_device, lower, _fx_key(sub, config, runtime)
    )
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

    Subgraphs with the same FX key (identical layers, ``compiler.blocks``) are looked up,
    lowered and compiled once: the others get a ``KernelCall.twin`` of the first's call.
    Lowering and cache lookups run in this thread, one kernel after the other; the compiles the
    cache misses run on up to ``os.cpu_count()`` threads when the runtime sets
    ``parallel_compile`` (its compiler is a subprocess), else here. With a ``report`` (ahead-of-time
    compiles), a kernel that fails is recorded there and its call is ``None`` instead of raising.
    """
    fx_keys = [_fx_key(sub, config, runtime) for _, sub in subs]
    first = {key: i for i, key in reversed(list(enumerate(fx_keys)))}
    distinct = [(i, name, sub) for i, (name, sub) in enumerate(subs) if first[fx_keys[i]] == i]
    calls = _compile_distinct(distinct, fx_keys, config, runtime, report)
    for i, (name, _) in enumerate(subs):
        if i not in calls:
            call = calls[first[fx_keys[i]]]
            calls[i] = None if call is None else call.twin(name)
    return [calls[i] for i in range(len(subs))]


def _compile_distinct(
    subs: Sequence[tuple[int, str, torch.fx.GraphModule]],
    fx_keys: Sequence[str],
    config: Config,
    runtime,
    report: precompile.Report | None,
) -> dict[int, KernelCall | None]:
    """``compile_kernels`` of subgraphs with distinct FX keys: their calls by position."""
    found: list[KernelCall | _Lowered | None] = []
    for i, name, sub in subs:
        try:
            found.append(
                _find_or_lower(sub, name, config, runtime, None, lower_subgraph, fx_keys[i])
            )
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
    return {i: next(done) if isinstance(f, _Lowered) else f for (i, _, _), f in zip(subs, found)}


def _parse_type(text: str) -> TensorType:
    dtype, dims = text[:-1].split("[")
    return TensorType(tuple(int(d) for d in dims.split("x") if d), DType(dtype))


def compile_listed(
    listed: Sequence[tuple[str, Any]],
    config: Config,
    runtime,
    report: precompile.Report,
    jobs: int | None = None,
) -> None:
    """Compile kernels given as IR (a precompile manifest, ``manifest.kernels_of``) into the
    cache for ``runtime``, each under the key a program's process looks it up by; counted in
    ``report`` (compiled, already cached, failed: a failure is recorded, never raised).

    Compiles run on ``jobs`` threads (default: one per core when the runtime's compiler is a
    subprocess, else one), with the progress bar of ``CompileProgress``."""
    cache = KernelCache(config.nkipy_cache)
    options = config.compile_options()
    tag = runtime_tag(runtime, options)
    versions = versions_key()
    todo = []
    for name, kernel in listed:
        text = format_kernel(kernel, with_origin=False)
        key = keys.kernel_key(text, runtime.name, tag, options.compiler_args, versions)
        if cache.load(key, count_miss=False) is not None:
            report.record_cached()
        else:
            todo.append((name, kernel, key))
    parallel = getattr(runtime, "parallel_compile", False)
    workers = max(1, min(len(todo), jobs or (os.cpu_count() or 1 if parallel else 1)))

    with CompileProgress(len(todo), runtime.name) as progress:

        def compile_one(job: tuple[str, Any, str]) -> None:
            name, kernel, key = job
            try:
                _, seconds, _ = compile_into_cache(cache, kernel, key, name, options, runtime, {})
            except Exception as exc:  # noqa: BLE001 - every kernel gets its chance
                report.record_failed(name, exc)
            else:
                if seconds is None:
                    report.record_cached()
                else:
                    report.record_compiled(seconds)
            finally:
                progress.done()

        with ThreadPoolExecutor(workers, thread_name_prefix="nkipy-compile") as pool:
            list(pool.map(compile_one, todo))
