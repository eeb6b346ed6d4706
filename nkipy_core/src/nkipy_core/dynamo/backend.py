"""The ``nkipy`` dynamo backend: ``torch.compile(model, backend="nkipy")``.

Registered through the ``torch_dynamo_backends`` entry point, so it works in a fresh interpreter
without importing nkipy. AOTAutograd produces functional forward/backward (or inference) graphs
with core ATen decompositions plus the plugins'; each graph goes through ``compile_graph``, or,
when its sizes are symbolic, becomes a ``SpecializedGraph`` that compiles one static graph per
size set it is called with. The compilers are serialisable for torch's AOTAutograd cache, so a
new process with warm caches skips AOTAutograd's trace too (``nkipy_core.dynamo.aot_cache``). An
inference graph for which AOTAutograd's runtime wrapper would do nothing is called without it
(``nkipy_core.dynamo.direct_call``). Each call is a new kernel graph of the compiled function,
explained and counted against ``max_kernels`` (``nkipy_core.observe.recompiles``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from nkipy_core import _torch
from nkipy_core.compiler.kernel_call import entry
from nkipy_core.compiler.pipeline import compile_graph
from nkipy_core.config.settings import current
from nkipy_core.dynamo import aot_cache, direct_call
from nkipy_core.dynamo.aot_cache import NkipyGraph
from nkipy_core.dynamo.specialize import SpecializedGraph, specializable
from nkipy_core.observe import recompiles
from nkipy_core.plugin import manager as plugins


def nkipy_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    options: dict[str, Any] | None = None,
    **_: Any,
):
    """Compile a dynamo graph; ``options`` are ``init_nkipy_backend`` settings for this function."""
    config = current().override(options)
    function, frame, fresh = _function_and_frame()
    names = [str(n.target) for n in gm.graph.find_nodes(op="placeholder")]
    recompiles.compiled(
        function,
        frame,
        recompiles.signature(example_inputs, names=names),
        config,
        kind="dynamo graph",
        fresh=fresh,
    )
    loaded = plugins.get(strict=config.strict)
    decompositions = loaded.decompositions.table(loaded.lowerings.ops())

    def compiler(kind: str, inference: bool = False) -> Any:
        def compile_one(graph: torch.fx.GraphModule, inputs: Sequence[Any]) -> NkipyGraph:
            saved, bypass = aot_cache.dumps(graph)  # before compile_graph rewrites it
            symbolic = specializable(graph)
            why_wrapped = (
                direct_call.why_wrapped(len(inputs), marks_dynamic_outputs=symbolic)
                if inference
                else "it is part of a training graph"
            )
            mutated = direct_call.mutated_inputs() if why_wrapped is None else ()
            if symbolic:
                name = f"the {kind} graph of {_frame_name()}"
                marks = direct_call.dynamic_output_dims() if why_wrapped is None else ()
                specialized = SpecializedGraph(
                    graph,
                    inputs,
                    config,
                    name,
                    compile_callable,
                    marks,
                    function=function,
                    names=names if kind == "forward" else None,
                )
                return NkipyGraph(
                    specialized,
                    config,
                    None,
                    bypass,
                    why_wrapped=why_wrapped,
                    num_inputs=len(inputs),
                    mutated=mutated,
                )
            fused = compile_graph(graph, inputs, config)
            return NkipyGraph(
                entry(fused),
                config,
                saved,
                bypass,
                fused,
                why_wrapped=why_wrapped,
                num_inputs=len(inputs),
                mutated=mutated,
            )

        return _torch.SerializableAOTDispatchCompiler(NkipyGraph, compile_one)

    with aot_cache.caching(gm, config, decompositions) as graphs:
        wrapped = _torch.aot_autograd(
            fw_compiler=compiler("forward"),
            bw_compiler=compiler("backward"),
            inference_compiler=compiler("forward", inference=True),
            decompositions=decompositions,
            keep_inference_input_mutations=True,
        )(gm, example_inputs)
    return direct_call.bare_call(graphs, gm, example_inputs, wrapped)


def compile_callable(gm: torch.fx.GraphModule, inputs: Sequence[Any], config) -> Any:
    """``compile_graph``, as what runs the graph it returns (``entry``: no ``nn.Module.__call__``)."""
    return entry(compile_graph(gm, inputs, config))


def _code_name(code: Any) -> str:
    return f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"


def _frame_name() -> str:
    """The compiled Python function and dynamo's compile id, to name a graph in warnings."""
    codes = _torch.TracingContext.get_traced_code() or []
    compile_id = _torch.CompileContext.current_compile_id()
    if not codes:
        return "a function"
    where = _code_name(codes[0])
    return f"{where}, compile {compile_id}" if compile_id is not None else where


def _function_and_frame() -> tuple[str, str, bool]:
    """The function ``torch.compile`` wrapped, the frame dynamo compiles a graph of (the same,
    except in a frame dynamo resumes the function in after a graph break), and whether this is
    the function's first compile since dynamo's caches were new (``torch.compiler.reset()``)."""
    codes = _torch.TracingContext.get_traced_code() or []
    if not codes:
        return "a function", "a function", False
    code = root = codes[0]
    resumed = _torch.ContinueExecutionCache.generated_code_metadata
    while (metadata := resumed.get(root)) is not None:
        root = metadata.code
    compile_id = _torch.CompileContext.current_compile_id()
    first = code is root and compile_id is not None and compile_id.frame_compile_id == 0
    return _code_name(root), _code_name(code), first
