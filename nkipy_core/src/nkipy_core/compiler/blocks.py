"""Repeated blocks: the layers of a model that repeat one module class (the decoder layers of a
Llama), found in an AOTAutograd graph so that each distinct layer becomes one kernel called once
per layer, instead of every layer fused into one kernel that grows with the model.

Why: ``neuronx-cc`` takes minutes per kernel, growing with its size, so one kernel for N layers
costs N times what one layer costs, and every change of N compiles again. Identical layers
lower to identical kernels (``canonical`` gives them the same FX code, hence the same FX and
kernel keys), which are compiled once and called N times (``compiler.kernels``).

A node belongs to a block when the outermost module of its stack (``_torch.module_stack``: dynamo's
record, which AOTAutograd copies onto backward nodes) that is an item of a container
(``layers.3``, ``layers[3]``) is of a class of the model's own (not one of ``torch.nn``'s: a
``Sequential`` of ``Linear``s is not split), and when at least one other instance in the graph
runs the same ops on the same types. The backward's gradient accumulations carry no stack; each
goes with its last contribution (the gradient coming from the layer above plus the one a layer
computes belongs to that layer, in every layer alike). Everything else is glue, fused as before.

Splitting never changes what is computed: a supported region is cut only where the block of its
nodes (in graph order) changes, which keeps the kernels free of cycles whatever the labels say.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

import torch
import torch.fx

from nkipy_core import _torch

#: the last part of a container item's module path: ``.3``, ``[3]``, ``, '3')`` (getattr form)
_ITEM = re.compile(r"(?:\.(\d+)|\[(\d+)\]|, '(\d+)'\))$")


def _own_class(cls: Any) -> bool:
    """Whether a module class is the model's own, not one of torch's building blocks."""
    module = getattr(cls, "__module__", None)
    name = module if isinstance(module, str) else str(cls)
    return not (name == "torch" or name.startswith("torch."))


def _instance(stack: list[tuple[str, Any]]) -> str | None:
    """The module path of the outermost container item of the model's own class in ``stack``."""
    for path, cls in stack:
        if _ITEM.search(path) and _own_class(cls):
            return path
    return None


def _signature(node: torch.fx.Node) -> str:
    val = node.meta.get("val")
    types = [
        f"{v.dtype}{tuple(v.shape)}"
        for v in (val if isinstance(val, (tuple, list)) else [val])
        if isinstance(v, torch.Tensor)
    ]
    return f"{node.target}:{','.join(types)}"


def block_labels(graph: torch.fx.Graph) -> dict[torch.fx.Node, str]:
    """The block instance (module path) of each node of ``graph`` that is in a repeated block."""
    labels: dict[torch.fx.Node, str | None] = {}
    order = {node: i for i, node in enumerate(graph.nodes)}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        stack = _torch.module_stack(node)
        if stack is not None:
            labels[node] = _instance(stack)
            continue
        # untagged (a gradient accumulation): with its last contribution computed
        computed = [n for n in node.all_input_nodes if n in labels]
        labels[node] = labels[max(computed, key=order.__getitem__)] if computed else None
    instances: dict[str, list[str]] = {}
    for node, label in labels.items():
        if label is not None:
            instances.setdefault(label, []).append(_signature(node))
    shapes = Counter(tuple(s) for s in instances.values())
    repeated = {label for label, s in instances.items() if shapes[tuple(s)] > 1}
    return {node: label for node, label in labels.items() if label in repeated}


def split(
    partitions: Iterable[Iterable[torch.fx.Node]],
    labels: dict[torch.fx.Node, str],
    order: dict[torch.fx.Node, int],
) -> list[list[torch.fx.Node]]:
    """Each partition cut into the runs of its nodes (in graph ``order``) that share a block
    label (or none: glue). A run is the partition's part of an interval of a topological
    order, so no path leaves one run and comes back into it through another: cutting an acyclic
    set of partitions this way leaves it acyclic."""
    runs: list[list[torch.fx.Node]] = []
    for nodes in partitions:
        current: list[torch.fx.Node] = []
        label: str | None = None
        for node in sorted(nodes, key=order.__getitem__):
            here = _label_of(node, labels)
            if current and here != label:
                runs.append(current)
                current = []
            current.append(node)
            label = here
        runs.append(current)
    return runs


def _label_of(node: torch.fx.Node, labels: dict[torch.fx.Node, str]) -> str | None:
    """A node's block; a ``getitem`` of a multi-output op goes with the op."""
    if node.target is operator.getitem and node.args and isinstance(node.args[0], torch.fx.Node):
        return labels.get(node.args[0])
    return labels.get(node)


#: what a kernel's input keeps of the metadata fusion copied from the node that produces it
_INPUT_META = ("val", "tensor_meta")


def canonical(sub: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``sub`` with its inputs named ``arg<i>`` and its nodes named for their ops in order, so
    two identical blocks (whose nodes carry their place in the whole graph in their names, and
    whose inputs carry the metadata of what produced them) have the same code, FX key and
    kernel."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    inputs = 0
    for node in sub.graph.nodes:
        if node.op == "placeholder":
            new = graph.placeholder(f"arg{inputs}")
            inputs += 1
            # only the input's value: the rest is its producer's, which is not in the block
            new.meta = {k: node.meta[k] for k in _INPUT_META if k in node.meta}
            env[node] = new
            continue
        elif node.op == "output":
            new = graph.output(torch.fx.node.map_arg(node.args[0], env.__getitem__))
        else:
            new = graph.create_node(
                node.op,
                node.target,
                torch.fx.node.map_arg(node.args, env.__getitem__),
                torch.fx.node.map_arg(node.kwargs, env.__getitem__),
            )
        new.meta = dict(node.meta)
        env[node] = new
    return torch.fx.GraphModule(sub, graph, sub.__class__.__name__)
