"""A graph ``compile_graph`` returned, as data a new process rebuilds it from without compiling.

torch's AOTAutograd cache hands a warm process the graphs AOTAutograd made (``aot_cache``).
Compiling such a graph again, even with every kernel in nkipy's kernel cache, re-runs the graph
passes, the plan, the partitioner and FX code generation on a graph of a hundred ops whose fake
values must first be unpickled: most of what nkipy adds to a warm start. What ``compile_graph``
returned is small: the graph's inputs, the ops left to torch on CPU (with their random-op keys,
CPU regions and input-mutation write-backs, all plain nodes by then), one call per kernel, and
the outputs. A ``StoredGraph`` is that graph as data: its nodes, with targets by name; each kernel
call as its kernel cache key and how the call places its outputs; its tensor constants; and the
fallback warnings ``compile_graph`` gave.

``loads`` loads each kernel by its key from nkipy's kernel cache (its executable and signature;
nothing is planned, partitioned or lowered), gives the same fallback warnings and makes the graph
module. When a kernel is missing from the kernel cache, or its entry is corrupt, it returns
``None`` and the caller compiles the ATen graph stored next to this one, which lowers the kernel
again: the two caches need not be kept in step.

What the node list cannot hold faithfully is not stored (``dumps`` says why, and a hit then
compiles the ATen graph): a target or argument that is not a function, an ATen overload or plain
data (pickled by reference or value, never an object with identity such as a higher-order op), a
constant that is not a CPU tensor, a submodule that is not a kernel call, a graph with its own
code generator.
"""

from __future__ import annotations

import io
import logging
import pickle
from collections.abc import Sequence
from typing import Any

import attrs
import torch
import torch.fx

from nkipy_core import _torch
from nkipy_core.cache.kernel_cache import KernelCache
from nkipy_core.compiler.fallback import FALLBACKS, report_fallbacks
from nkipy_core.compiler.kernel_call import Boundary, KernelCall, inverse_permutation
from nkipy_core.compiler.kernels import load_kernel
from nkipy_core.config.settings import Config, select_runtime
from nkipy_core.plugin.registry import op_name, resolve_op

log = logging.getLogger("nkipy.aot_cache")


@attrs.frozen
class _Ref:
    """An argument that is the value of the ``index``-th node."""

    index: int


@attrs.frozen
class _Node:
    op: str
    name: str
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@attrs.frozen
class _Kernel:
    """A kernel call: the submodule ``attribute`` of the graph, kernel cache entry ``key``."""

    attribute: str
    name: str
    key: str
    tuple_output: bool
    on_device: tuple[bool, ...]
    orders: tuple[tuple[int, ...] | None, ...]
    boundary: Boundary


@attrs.frozen
class StoredGraph:
    nodes: tuple[_Node, ...]
    kernels: tuple[_Kernel, ...]
    constants: dict[str, torch.Tensor]
    #: op name -> why it runs on CPU (``fallback.find_fallbacks``)
    fallbacks: dict[str, str]


def dumps(gm: torch.fx.GraphModule) -> tuple[bytes | None, str | None]:
    """``gm``, a graph ``compile_graph`` returned, pickled as a ``StoredGraph``; or why it cannot be."""
    codegen = _torch.graph_codegen(gm.graph)
    if type(codegen) is not torch.fx.graph.CodeGen:
        return None, f"its graph has its own code generator ({type(codegen).__name__})"
    index: dict[torch.fx.Node, int] = {}
    nodes, kernels, constants = [], [], {}
    for i, node in enumerate(gm.graph.nodes):
        index[node] = i
        if node.op == "call_module":
            call = gm.get_submodule(node.target)
            if not isinstance(call, KernelCall):
                return (
                    None,
                    f"its submodule {node.target} is a {type(call).__name__}, not a kernel call",
                )
            orders = tuple(
                None if o is None else inverse_permutation(o) for o in call.inverse_orders
            )
            kernels.append(
                _Kernel(
                    node.target,
                    call.kernel_name,
                    call.entry,
                    call.tuple_output,
                    call.on_device,
                    orders,
                    call.boundary,
                )
            )
        elif node.op == "get_attr":
            value: Any = gm
            for part in node.target.split("."):
                value = getattr(value, part)
            constants[node.target] = value
        nodes.append(
            _Node(
                node.op,
                node.name,
                node.target,
                # map_arg maps nodes to any value; torch types the result as fx arguments
                torch.fx.node.map_arg(node.args, lambda n: _Ref(index[n])),  # type: ignore[arg-type, return-value]
                dict(torch.fx.node.map_arg(node.kwargs, lambda n: _Ref(index[n]))),  # type: ignore[arg-type, return-value]
            )
        )
    stored = StoredGraph(tuple(nodes), tuple(kernels), constants, gm.meta[FALLBACKS])
    with io.BytesIO() as stream:
        try:
            _Pickler(stream).dump(stored)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            return None, f"its compiled graph cannot be stored ({exc})"
        return stream.getvalue(), None


def loads(data: bytes, config: Config) -> torch.fx.GraphModule | None:
    """The graph ``dumps`` stored, its kernels loaded from nkipy's kernel cache and its fallbacks
    reported; ``None`` if a kernel is missing from the cache (nothing is reported then: the
    caller compiles the ATen graph, which reports)."""
    stored: StoredGraph = pickle.loads(data)
    runtime = select_runtime(config)
    cache = KernelCache(config.nkipy_cache)
    options = config.compile_options()
    root: dict[str, Any] = dict(stored.constants)
    # a repeated layer's kernel is loaded once and called through twins
    loaded: dict[tuple, KernelCall] = {}
    for k in stored.kernels:
        same = (k.key, k.tuple_output, k.on_device, k.orders, k.boundary)
        if same in loaded:
            root[k.attribute] = loaded[same].twin(k.name)
            continue
        call = load_kernel(
            cache,
            k.key,
            k.name,
            runtime,
            options,
            k.tuple_output,
            k.on_device,
            k.orders,
            count_miss=False,
            boundary=k.boundary,
        )
        if call is None:
            log.info(
                "nkipy: kernel %s (%s) is not in the kernel cache; compiling the graph again",
                k.name,
                k.key,
            )
            return None
        root[k.attribute] = loaded[same] = call
    graph = torch.fx.Graph()
    nodes: list[torch.fx.Node] = []
    for n in stored.nodes:
        nodes.append(
            graph.create_node(
                n.op, n.target, _nodes(n.args, nodes), _nodes(n.kwargs, nodes), n.name
            )
        )
    report_fallbacks(stored.fallbacks, config.strict)
    log.debug(
        "a graph of %d kernel(s) rebuilt from torch's AOTAutograd cache without compiling it",
        len(stored.kernels),
    )
    return torch.fx.GraphModule(root, graph)


def _nodes(arg: Any, nodes: Sequence[torch.fx.Node]) -> Any:
    return torch.fx.node.map_aggregate(arg, lambda a: nodes[a.index] if isinstance(a, _Ref) else a)


class _Pickler(pickle.Pickler):
    """ATen overloads by name; refuses what would not come back as the same thing (see the
    module docstring)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, _torch.OpOverload):
            return resolve_op, (op_name(obj),)
        if isinstance(
            obj,
            (_torch.OperatorBase, _torch.OpOverloadPacket, torch.nn.Module, torch.fx.Node),
        ):
            raise pickle.PicklingError(f"{obj!r} is not an ATen overload, a function or data")
        if isinstance(obj, _torch.FakeTensor) or (
            isinstance(obj, torch.Tensor) and obj.device.type != "cpu"
        ):
            raise pickle.PicklingError(
                f"a constant is a {type(obj).__name__} on {obj.device}, not a CPU tensor"
            )
        return NotImplemented
