"""The FX -> kernels driver: the compile stages run in order on one graph.

``compile_graph`` takes one functional ATen graph from AOTAutograd (forward, backward or
inference) and returns a callable: the same graph in which every maximal supported subgraph
is replaced by a call to a compiled NKIPy kernel and everything else still runs as torch on CPU.

The stages, in order: ``prepare`` (graph passes), ``plan`` (a rule per node), ``fallback`` (the
ops left on CPU, reported), ``partition`` (fused subgraphs), ``lower`` (one NKIPy kernel per
subgraph), ``kernels`` (cache, compile, ``KernelCall``), ``in_place`` (inputs the graph
updates, written by their kernel call).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from nkipy_core.cache.kernel_cache import KernelCache
from nkipy_core.compiler import precompile, rng
from nkipy_core.compiler.fallback import FALLBACKS, find_fallbacks, report_fallbacks
from nkipy_core.compiler.in_place import write_inputs_in_kernels
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.compiler.kernels import compile_kernels
from nkipy_core.compiler.partition import partition
from nkipy_core.compiler.plan import plan
from nkipy_core.compiler.prepare import prepare
from nkipy_core.config.settings import Config, select_runtime
from nkipy_core.plugin.registry import LoweringRule
from nkipy_core.runtime.base import Runtime

log = logging.getLogger("nkipy.compiler")


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
    prepare(gm, config, runtime)
    decisions = plan(
        gm, config, cache, runtime
    )  # cached under the runtime's name: its process finds it
    rng.unseed_fallbacks(gm, {n for n, d in decisions.items() if isinstance(d, LoweringRule)})
    fallbacks = find_fallbacks(gm, decisions)
    if report is None:
        report_fallbacks(fallbacks, config.strict)
    if not any(isinstance(d, LoweringRule) for d in decisions.values()):
        gm.meta[FALLBACKS] = fallbacks
        return gm
    by_layers = config.dedup_layers and not getattr(runtime, "whole_graphs", False)
    fused, subs = partition(gm, decisions, by_layers)
    for (name, _), call in zip(subs, compile_kernels(subs, config, runtime, report)):
        setattr(fused, name, call)
    write_inputs_in_kernels(fused)
    fused.recompile()
    fused.meta[FALLBACKS] = fallbacks
    log.info(
        "compiled a graph into %d kernel(s)",
        sum(isinstance(m, KernelCall) for m in fused.children()),
    )
    return fused
