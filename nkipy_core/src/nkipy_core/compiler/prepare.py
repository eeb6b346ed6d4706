"""The graph passes before planning: the packs' ``nkipy_graph_passes``, writes made functional,
outputs that are views of graph inputs left as torch views, ops in CPU regions wrapped to stay
torch, random ops seeded, graph inputs marked.
"""

from __future__ import annotations

import torch
import torch.fx

from nkipy_core import _torch
from nkipy_core.compiler import regions, rng
from nkipy_core.compiler.aten_schema import is_view
from nkipy_core.compiler.lowering import GRAPH_INPUT
from nkipy_core.compiler.plan import GLUE, TORCH_VIEW
from nkipy_core.config.settings import Config
from nkipy_core.plugin import manager as plugins
from nkipy_core.runtime.base import Runtime


def prepare(gm: torch.fx.GraphModule, config: Config, runtime: Runtime) -> None:
    """Run the graph passes on ``gm`` in place, for ``runtime``, and recompile it."""
    loaded = plugins.get(strict=config.strict)
    for passes in loaded.manager.hook.nkipy_graph_passes(stage="aten", runtime=runtime):
        for graph_pass in passes or ():
            graph_pass(gm)
    functionalize_writes(gm)
    outputs_as_views(gm)
    for node in gm.graph.nodes:
        if node.op == "call_function" and regions.in_cpu_region(node) and not is_view(node.target):
            node.args = (node.target, *node.args)
            node.target = regions.run_on_cpu
    rng.seed_random_ops(gm, config.fallback_random)
    for node in gm.graph.find_nodes(op="placeholder"):
        node.meta[GRAPH_INPUT] = True
    gm.graph.lint()
    gm.recompile()


def _written_argument(node: torch.fx.Node) -> torch.fx.Node | None:
    """The argument an ``out=`` or in-place node writes and returns (``atan2.out``'s ``out``,
    ``add_``'s ``self``), if it writes exactly one and returns it; else ``None``."""
    if (
        node.op != "call_function"
        or not isinstance(node.target, _torch.OpOverload)
        or node.target in GLUE
    ):
        return None
    schema = _torch.schema(node.target)
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


def _view_chain(node: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The view ops from a graph input to ``node``, first to last, if ``node`` is a view of a
    graph input through single-result views (``t``, ``permute``, ``view``, ``slice``, ...)."""
    chain = []
    while node.op == "call_function":
        if not isinstance(node.target, _torch.OpOverload) or not is_view(node.target):
            return None
        source = node.args[0] if node.args else None
        if len(_torch.schema(node.target).returns) != 1 or not isinstance(source, torch.fx.Node):
            return None
        chain.append(node)
        node = source
    return chain[::-1] if chain and node.op == "placeholder" else None


def outputs_as_views(gm: torch.fx.GraphModule) -> None:
    """A graph output that is a view of a graph input, which a kernel reads as well (a linear
    layer's ``w.t()``, which AOTAutograd saves for the backward), is returned as that torch view:
    a twin of the view's nodes, outside the kernels, that only the output reads.

    As a kernel result it would be a copy at every call, since a kernel result is memory of its
    own (a kernel cannot tell ``w.t()`` from ``w.clone()``); torch's own view is what eager
    returns. A view that only the output reads stays as it is: AOTAutograd already returns
    such outputs as views of its inputs, and a graph of that one view (an OpInfo sample) then
    still tests its rule. A view of an input the graph writes (``copy_``) stays in the kernel:
    the output must hold the value from before the write."""
    output = gm.graph.output_node()
    written = {
        n.args[0]
        for n in gm.graph.find_nodes(op="call_function", target=torch.ops.aten.copy_.default)
    }
    twins: dict[torch.fx.Node, torch.fx.Node] = {}
    for value in output.all_input_nodes:
        chain = _view_chain(value)
        if chain is None or chain[0].args[0] in written or len(value.users) == 1:
            continue
        with gm.graph.inserting_before(output):
            for node in chain:
                if node not in twins:
                    twin = gm.graph.node_copy(node, lambda n: twins.get(n, n))
                    twin.meta[TORCH_VIEW] = True
                    twins[node] = twin
        output.replace_input_with(value, twins[value])
    for node in reversed(list(twins)):  # a view before the views made of it
        if not node.users:
            gm.graph.erase_node(node)
