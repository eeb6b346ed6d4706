"""Inference graphs called without AOTAutograd's runtime wrapper, where it would do nothing.

AOTAutograd returns every compiled graph inside a runtime wrapper. The wrapper writes back
input mutations the graph returns, regenerates outputs that alias an input or another output,
wraps and unwraps tensor subclasses, threads effect tokens, marks dynamic output sizes, and runs
the graph with grad mode and autocast off. An inference graph that needs none of this (no input
mutated outside the graph, every output a new tensor, plain tensors only, no tokens, autocast
off) still pays for the wrapper's frames: about 2 µs per call, an eighth of a one-op graph's call
and more than nkipy's own part of it (docs/benchmarks.md); 3 µs for a graph of 28 inputs
that writes one of them. For such a graph the backend hands dynamo the compiled graph itself,
under ``torch._dynamo.disable`` as AOTAutograd's result would be. An input the graph writes
itself (a ``copy_`` AOTAutograd keeps in it) needs of the wrapper only that its version counter
move, as after any in-place op: the direct call moves it (``mutated_inputs``).

The wrapper's grad-mode switch is the one thing skipped that could be observed, so a graph is
called directly only when grad mode is off or no input requires grad (dynamo guards on both):
then nothing the graph runs as torch (CPU regions, fallbacks, a symbolic graph past its
specialisation limit) can record autograd history either way. AOTAutograd also compiles an
inference graph for inputs that require grad when no output does (all of them detached, integer
or boolean); such a graph keeps the wrapper, which runs it with grad mode off.

A graph with symbolic sizes (``nkipy_core.dynamo.specialize``) qualifies on the same terms but for
one thing the wrapper does for it: it marks each output's symbolic dimensions on the output
tensor, so that dynamo treats them as dynamic when the output enters another compiled graph
(dynamism carried across a graph break). ``dynamic_output_dims`` says which, and the
``SpecializedGraph`` called directly marks them itself.

Which graphs qualify is decided from AOTAutograd's metadata of the graph while it is compiled
(``why_wrapped``), stored with the graph in torch's AOTAutograd cache so a warm start decides
the same, and completed by what only the backend sees (``bare_call``): duplicated inputs,
autocast, inputs that require grad. A dynamo graph that holds parameters or buffers (a compiled
optimizer step's) is called with them before its inputs, as the wrapper calls it.
``cache_stats()`` counts the graphs dynamo calls each way as ``direct_graphs`` and
``wrapped_graphs``; why a graph keeps the wrapper is logged at DEBUG by ``nkipy.direct_call``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from nkipy_core import _torch
from nkipy_core.cache.kernel_cache import STATS

log = logging.getLogger("nkipy.direct_call")


def _metadata() -> Any:
    """AOTAutograd's metadata of the graph being compiled (its ``ViewAndMutationMeta``), kept in
    the tracing context."""
    context = _torch.TracingContext.try_get()
    return context.fw_metadata if context is not None else None


def why_wrapped(num_inputs: int, *, marks_dynamic_outputs: bool = False) -> str | None:
    """Why the inference graph being compiled (``num_inputs`` inputs) needs AOTAutograd's runtime
    wrapper, from AOTAutograd's metadata of it; ``None``: it does not. ``marks_dynamic_outputs``:
    the caller marks the outputs' symbolic dimensions itself (``dynamic_output_dims``)."""
    meta = _metadata()
    if meta is None:
        return "AOTAutograd gave no metadata for it"
    if any(
        i.mutates_metadata or i.mutation_type == _torch.MutationType.MUTATED_OUT_GRAPH
        for i in meta.input_info
    ):
        return "it mutates an input outside the graph"
    if any(
        o.output_type != _torch.OutputType.non_alias or o.requires_grad for o in meta.output_info
    ):
        return "an output aliases an input or another output, or requires grad"
    if not marks_dynamic_outputs and any(o.dynamic_dims for o in meta.output_info):
        return "an output has sizes that depend on tensor values"
    if (
        meta.num_intermediate_bases
        or meta.tokens
        or meta.num_graphsafe_rng_states
        or meta.is_rng_op_functionalized
    ):
        return "it returns intermediate bases, effect tokens or RNG state"
    if meta.grad_enabled_mutation is not None:
        return "it changes grad mode"
    if not all(
        isinstance(m, _torch.PlainTensorMeta | int)
        for m in (*meta.subclass_inp_meta, *meta.subclass_fw_graph_out_meta)
    ):
        return "it takes or returns tensor subclasses"
    if len(meta.input_info) != num_inputs:
        return "AOTAutograd added or removed inputs"
    return None


def mutated_inputs() -> tuple[int, ...]:
    """The inputs the graph being compiled writes and autograd sees written: the wrapper
    increments their version counters after each call (``increment_mutation_versions``), as
    every in-place torch op does, and so does the direct call (``bare_call``)."""
    meta = _metadata()
    return tuple(meta.mutated_graph_handled_indices_seen_by_autograd) if meta else ()


def dynamic_output_dims() -> tuple[tuple[int, set[int]], ...]:
    """The outputs of the graph being compiled that have symbolic dimensions, as (index, those
    dimensions): what AOTAutograd's wrapper marks on them on each call
    (``mark_dynamo_propagated_dynamic_indices``)."""
    meta = _metadata()
    return (
        tuple((i, o.dynamic_dims) for i, o in enumerate(meta.output_info) if o.dynamic_dims)
        if meta
        else ()
    )


def bare_call(
    graphs: Sequence[Any],
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    wrapped: Callable[..., Any],
) -> Callable[..., Any]:
    """What dynamo calls for dynamo graph ``gm``: the one ``NkipyGraph`` AOTAutograd compiled or
    restored for it (``graphs``) without the runtime wrapper if it qualifies, else ``wrapped``,
    what AOTAutograd returned."""
    graph = graphs[0] if len(graphs) == 1 else None
    why = (
        graph.why_wrapped
        if graph is not None
        else f"AOTAutograd compiled {len(graphs)} graphs for it"
    )
    # what the graph holds, passed by AOTAutograd's wrapper before the inputs (a compiled
    # optimizer step's parameters and states)
    held = [
        *dict(gm.named_parameters(remove_duplicate=False)).values(),
        *dict(gm.named_buffers(remove_duplicate=False)).values(),
    ]
    if why is None:
        assert graph is not None, "why is None only when AOTAutograd compiled one graph"
        if _torch.is_any_autocast_enabled():
            why = "autocast is on"
        elif graph.num_inputs != len(held) + len(example_inputs):
            why = "AOTAutograd removed duplicated inputs"
        elif torch.is_grad_enabled() and any(
            isinstance(x, torch.Tensor) and x.requires_grad for x in (*held, *example_inputs)
        ):
            why = "an input requires grad (the wrapper runs the graph with grad mode off)"
        elif any(_torch.is_traceable_wrapper_subclass(x) for x in (*held, *example_inputs)):
            why = "it takes tensor subclasses"
    if graph is None or why is not None:
        log.debug("nkipy: the compiled graph keeps AOTAutograd's runtime wrapper: %s", why)
        STATS["wrapped_graphs"] += 1
        return wrapped
    STATS["direct_graphs"] += 1
    run = _direct(graph.compiled, tuple(held), graph.mutated)
    return torch.compiler.disable(run, reason="do not trace nkipy's compiled graph")


def _direct(
    compiled: Callable[..., Any], held: tuple[torch.Tensor, ...], mutated: tuple[int, ...]
) -> Callable[..., Any]:
    """``compiled`` called as AOTAutograd's wrapper calls it: after what the graph holds,
    ``held``, then the version counters of the inputs at ``mutated`` incremented (indices into
    both together)."""
    if not held and not mutated:
        return compiled

    def call(*args: Any) -> Any:
        full = (*held, *args) if held else args
        outputs = compiled(*full)
        if mutated:
            torch.autograd.graph.increment_version([full[i] for i in mutated])
        return outputs

    return call
