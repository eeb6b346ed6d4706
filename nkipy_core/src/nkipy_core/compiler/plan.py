"""Planning: per node, the first rule that lowers it (tried on a scratch kernel) or why it stays
torch on CPU; cached by graph, so a warm run skips the rules.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.fx

from nkipy_core import _torch
from nkipy_core.cache import keys
from nkipy_core.cache.kernel_cache import STATS, KernelCache
from nkipy_core.compiler import regions, rng
from nkipy_core.compiler.key_parts import placeholder_key, runtime_tag, versions_key
from nkipy_core.compiler.lowering import invoke, output_types, tensor_type, touches_complex
from nkipy_core.config.settings import Config
from nkipy_core.errors import LoweringError, Unsupported, VerificationError
from nkipy_core.ir.builder import KernelBuilder, Traced
from nkipy_core.ir.primitives import primitive
from nkipy_core.plugin import manager as plugins
from nkipy_core.plugin.registry import LoweringRegistry, LoweringRule, op_name
from nkipy_core.runtime.base import Runtime, runs_custom_call

log = logging.getLogger("nkipy.compiler")


#: ops that stay in torch without a fallback warning: they move data or split kernels on purpose
GLUE = {torch.ops.aten.copy_.default, regions.BOUNDARY, rng.RNG_KEY}


#: node.meta key holding the rule chosen for a node; meta travels with nodes into fused subgraphs
RULE = "nkipy_rule"

#: node.meta key of a view that stays a torch view outside kernels (``prepare.outputs_as_views``)
TORCH_VIEW = "nkipy_torch_view"


def _candidates(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [
        n
        for n in gm.graph.nodes
        if n.op == "call_function"
        and isinstance(n.target, _torch.OpOverload)
        and n.target not in GLUE
        and not n.meta.get(TORCH_VIEW)
    ]


def choose_rule(
    node: torch.fx.Node, registry: LoweringRegistry, config: Config, runtime: Runtime
) -> LoweringRule | str:
    """The first rule of ``registry`` that accepts ``node`` (tried on a scratch kernel), or why
    none did.

    A rule whose lowering the runtime cannot run inside a kernel is declined (see
    ``_runtime_declines``): the node then runs as torch, and the fallback warning says why."""
    strict = config.strict
    rules = registry.rules_for(node.target)
    if not rules:
        return registry.unlowered_reason(node.target)
    try:
        output_types(node)
    except Unsupported as exc:
        return f"it produces {exc}"
    if touches_complex(node):
        rules = [r for r in rules if r.complex]
        if not rules:
            return "no installed pack lowers it for complex tensors"
    reasons = []
    for rule in rules:
        builder = KernelBuilder("trial")

        def lookup(arg: torch.fx.Node) -> Traced:
            return builder.param(tensor_type(arg.meta.get("val")))

        try:
            result = invoke(rule, node, builder, lookup)
            reason = _runtime_declines(builder, result, config, runtime)
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


def _runtime_declines(builder: KernelBuilder, result: Any, config: Config, runtime: Runtime) -> str:
    """Why ``runtime`` cannot run what ``builder`` holds inside a kernel ("" if it can).

    Collectives need a runtime that runs them between processes (``kernel_collectives``): one
    that cannot would compute each rank's part alone, silently wrong. Custom calls need a runtime
    that runs their host function or whose compiler knows their target. A runtime whose compiler
    accepts less than the IR can say (``Runtime.declines``: the Neuron target profile) is asked
    about the op's kernel, results included."""
    if not getattr(runtime, "kernel_collectives", False) and any(
        primitive(name).collective for name in builder.primitives()
    ):
        return f"the {runtime.name} runtime runs no collectives inside kernels"
    unknown = sorted(t for t in builder.custom_call_targets() if not runs_custom_call(runtime, t))
    if unknown:
        return f"the {runtime.name} runtime runs no custom calls to {', '.join(unknown)} inside kernels"
    declines = getattr(runtime, "declines", None)
    if declines is None:
        return ""
    outputs = [r for r in (result if isinstance(result, tuple) else (result,)) if r is not None]
    return declines(builder.finish(outputs), config.compile_options())


def _plan_key(gm: torch.fx.GraphModule, registry, runtime: Runtime, config: Config) -> str:
    """Plans depend on the runtime and its target (what ``Runtime.declines`` says)."""
    metas = [placeholder_key(n) for n in gm.graph.nodes if n.op == "placeholder"]
    rules = sorted({r.fingerprint for n in _candidates(gm) for r in registry.rules_for(n.target)})
    tag = runtime_tag(runtime, config.compile_options())
    return keys.plan_key(gm.code, metas, rules, versions_key(), f"{runtime.name}/{tag}")


def plan(
    gm: torch.fx.GraphModule, config: Config, cache: KernelCache, runtime: Runtime
) -> dict[str, LoweringRule | str]:
    """Node name -> chosen rule, or the reason it falls back; cached by graph so warm runs skip rules."""
    registry = plugins.get(strict=config.strict).lowerings
    key = _plan_key(gm, registry, runtime, config)
    nodes = _candidates(gm)
    cached = _restore_plan(cache.get_index(key), nodes, registry)
    if cached is not None:
        log.debug(
            "plan of a graph of %d op(s) for %s reused from the cache", len(nodes), runtime.name
        )
        return cached
    decisions = {n.name: choose_rule(n, registry, config, runtime) for n in nodes}
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
        assert isinstance(node.target, _torch.OpOverload), "_candidates keeps only operators"
        if node.target.name() == _WAIT_TENSOR and isinstance(decisions[node.name], LoweringRule):
            producer = node.args[0]
            if not (
                isinstance(producer, torch.fx.Node)
                and isinstance(decisions.get(producer.name), LoweringRule)
            ):
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
