"""The ``nkipy`` dynamo backend: ``torch.compile(model, backend="nkipy")``.

Registered through the ``torch_dynamo_backends`` entry point, so it works in a fresh interpreter
without importing nkipy. AOTAutograd produces functional forward/backward (or inference) graphs
with core ATen decompositions plus the plugins'; each graph goes through ``compile_graph``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from . import plugins
from .compiler import compile_graph
from .config import current


def nkipy_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: dict[str, Any] | None = None, **_: Any):
    """Compile a dynamo graph; ``options`` are ``init_nkipy_backend`` settings for this function."""
    config = current().override(options)
    loaded = plugins.get(strict=config.strict)
    decompositions = loaded.decompositions.table(loaded.lowerings.ops())

    def compiler(graph: torch.fx.GraphModule, inputs: Sequence[Any]):
        # boxed: AOTAutograd passes a list it may free early, which keeps peak memory down
        return make_boxed_func(compile_graph(graph, inputs, config))

    return aot_autograd(
        fw_compiler=compiler,
        bw_compiler=compiler,
        decompositions=decompositions,
        keep_inference_input_mutations=True,
    )(gm, example_inputs)
