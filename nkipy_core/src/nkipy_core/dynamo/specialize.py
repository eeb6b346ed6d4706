"""Shape specialisation: a graph with symbolic sizes runs as one static kernel graph per size set.

Kernels are static (Trainium needs every size at compile time), but dynamo hands the backend
graphs with symbolic sizes: ``dynamic=True``, ``torch._dynamo.mark_dynamic``, and by default
any graph called again with a new size (automatic dynamic shapes). Rather than making the IR
symbolic, such a graph is resolved at the backend boundary: each distinct set of concrete sizes
it is called with gets a copy of the graph in which every size is a constant (the copy is
re-propagated with fake tensors of those sizes, and the symbolic arithmetic on sizes is folded
away), and that static copy goes through the ordinary ``compile_graph``. Partitioning,
strictness, fallback warnings and the disk cache are therefore exactly those of a static graph;
the cache keys hash the static copy, so a new process with a warm cache does not lower again.

The size set the graph was traced with (the shape environment's hints) is compiled at once, so
strict-mode errors surface at compile time as they do for a static graph. Each further size set
is compiled on its first call (counted in ``cache_stats()["specializations"]``) and kept in
memory. Called directly by dynamo (``nkipy_core.dynamo.direct_call``), it also marks its outputs'
symbolic dimensions as AOTAutograd's runtime wrapper would. Past ``max_specializations`` size
sets, calls with new sizes run the symbolic graph op by op in eager torch: counted in
``cache_stats()["unspecialized_calls"]`` and warned about once per graph; in strict mode that
is a ``SpecializationLimitError`` instead. A graph whose sizes depend on tensor values, not
only on its inputs' sizes, is not specialised (see ``specializable``). Each size set after the
first is a new kernel graph of the compiled function: explained by the sizes that differ from the
nearest size set compiled, and counted against ``max_kernels`` (``nkipy_core.observe.recompiles``).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_symbols

from nkipy_core import _torch
from nkipy_core.cache.kernel_cache import STATS
from nkipy_core.compiler.fallback import FallbackWarning
from nkipy_core.config.settings import Config
from nkipy_core.errors import SpecializationLimitError
from nkipy_core.observe import recompiles

log = logging.getLogger("nkipy.specialize")

_SCALARS = (int, float, bool)
_SYMBOLIC_SCALARS = (torch.SymInt, torch.SymFloat, torch.SymBool)


def specializable(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` has symbolic sizes, all determined by its inputs' sizes and scalars.

    Not so for a size that depends on tensor values (``nonzero``, boolean indexing): its symbol
    appears in no input, so concrete inputs do not make the graph static.
    """
    inputs = [free_symbols(n.meta.get("val")) for n in gm.graph.find_nodes(op="placeholder")]
    known = set().union(*inputs)
    return bool(known) and all(
        free_symbols(n.meta.get("val")).issubset(known) for n in gm.graph.nodes
    )


def size_key(args: Sequence[Any]) -> tuple:
    """What a static copy of a graph is specialised on: the shape and strides of every tensor
    argument and the value of every scalar one (dtypes and devices are guarded by dynamo)."""
    return tuple([(a.shape, a.stride()) if isinstance(a, torch.Tensor) else a for a in args])


class _NoHint(Exception):
    """An example input has a size with no value at compile time (``mark_unbacked``)."""


def _hint(value: Any) -> Any:
    """A symbolic scalar's value in the trace that produced it (no guard is added)."""
    if isinstance(value, _SYMBOLIC_SCALARS):
        if not value.node.has_hint():
            raise _NoHint
        return value.node.hint
    return value


def hinted_key(example_inputs: Sequence[Any]) -> tuple | None:
    """``size_key`` of the call the graph was traced for, from the shape environment's hints;
    ``None`` if some size has none."""
    try:
        return tuple(
            (torch.Size(_hint(d) for d in a.shape), tuple(_hint(s) for s in a.stride()))
            if isinstance(a, torch.Tensor)
            else _hint(a)
            for a in example_inputs
        )
    except _NoHint:
        return None


def scalar_inputs(gm: torch.fx.GraphModule) -> frozenset[int]:
    """The positions of ``gm``'s inputs that are numbers (sizes, mostly): a static copy of the
    graph holds their values as constants and does not take them (``specialize``)."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    return frozenset(
        i
        for i, n in enumerate(placeholders)
        if isinstance(n.meta.get("val"), _SCALARS + _SYMBOLIC_SCALARS)
    )


def specialize(
    gm: torch.fx.GraphModule, key: tuple, like: Sequence[Any]
) -> tuple[torch.fx.GraphModule, list[Any]]:
    """A static copy of ``gm`` for the sizes in ``key`` (``size_key`` of a call; ``like`` gives
    the dtypes and devices), and fake example inputs for it.

    Every node is re-run on fake tensors of the concrete sizes; a node whose value is then a
    plain number (a SymInt input, ``sym_size``, arithmetic on sizes) is replaced by that
    number in its users, so the copy holds no symbolic value and its code names the sizes.
    The copy does not take the inputs at ``scalar_inputs(gm)``: their values are in it. Runtime
    asserts on sizes (``_assert_scalar``) are checked here, once, and dropped.
    """
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    mode = _torch.FakeTensorMode()  # no shape environment: every size is static
    env: dict[torch.fx.Node, Any] = {}
    examples = iter(zip(key, like))

    def value_of(arg: torch.fx.Node) -> Any:
        return env[arg]

    def fold(arg: torch.fx.Node) -> Any:
        value = env[arg]
        return value if isinstance(value, _SCALARS) else arg

    # the graph's ops are final (autocast applied, autograd split off): replay them as they are
    with mode, torch.no_grad(), _torch.DisableAutocast():
        for node in list(graph.nodes):
            if node.op == "placeholder":
                spec, example = next(examples)
                if isinstance(example, torch.Tensor):
                    shape, stride = spec
                    value = _with_math_bits(
                        torch.empty_strided(
                            shape, stride, dtype=example.dtype, device=example.device
                        ),
                        example,
                    )
                else:
                    value = spec
            elif node.op == "get_attr":
                attr = getattr(gm, node.target)
                value = mode.from_tensor(attr) if isinstance(attr, torch.Tensor) else attr
            elif node.op == "call_function":
                node.args, node.kwargs = torch.fx.node.map_arg((node.args, node.kwargs), fold)
                args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), value_of)
                value = node.target(*args, **kwargs)
            elif node.op == "output":
                node.args = torch.fx.node.map_arg(node.args, fold)
                continue
            else:
                raise NotImplementedError(f"{node.op} node {node.name} in an AOTAutograd graph")
            env[node] = value
            node.meta["val"] = value
            node.meta.pop("tensor_meta", None)  # describes the symbolic value
    for node in reversed(graph.nodes):
        if node.op != "call_function" or node.users:
            continue
        if (
            isinstance(env[node], _SCALARS) or not node.all_input_nodes
        ):  # folded, or a checked assert
            graph.erase_node(node)
    placeholders = graph.find_nodes(op="placeholder")
    for i in scalar_inputs(gm):
        graph.erase_node(placeholders[i])  # folded into every user above
    graph.lint()
    inputs = [env[n] for n in graph.find_nodes(op="placeholder")]
    return torch.fx.GraphModule(gm, graph), inputs


def _with_math_bits(value: torch.Tensor, example: torch.Tensor) -> torch.Tensor:
    """``value`` with ``example``'s conjugate and negative bits (dynamo guards them): a kernel
    taking such an input resolves it (``KernelCall``'s ``Boundary``)."""
    if example.is_conj():
        value = value.conj()
    if example.is_neg():
        value = _torch.neg_view(value)
    return value


class SpecializedGraph:
    """A symbolic graph as a callable: it dispatches each call to the static graph compiled for
    the call's sizes, compiling it on first use (see the module docstring).

    ``output_dims``: (output index, dimensions) to mark as dynamic on each call's outputs, when
    no AOTAutograd runtime wrapper does it (``direct_call.dynamic_output_dims``). ``function``:
    the compiled function the graph belongs to, whose kernel graphs it counts into; ``names``:
    the dynamo graph's names of the inputs, to explain a new size set with (a forward graph
    takes the dynamo graph's inputs in order; ignored unless there are as many)."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        config: Config,
        name: str,
        compile_static: Callable[[torch.fx.GraphModule, Sequence[Any], Config], Callable],
        output_dims: Sequence[tuple[int, set[int]]] = (),
        function: str = "a function",
        names: Sequence[str] | None = None,
    ):
        self.gm = gm
        self.config = config
        self.name = name
        self.compile_static = compile_static
        self.output_dims = tuple(output_dims)
        self.function = function
        self.names = names
        scalars = scalar_inputs(gm)
        #: the positions of the arguments a static copy takes (``None``: all of them)
        self.taken = (
            tuple(i for i in range(len(example_inputs)) if i not in scalars) if scalars else None
        )
        self.compiled: dict[tuple, Callable] = {}
        self.warned = False
        key = hinted_key(example_inputs)
        if key is not None:
            self.compiled[key] = self._specialize(key, example_inputs)

    def __call__(self, *args: Any) -> Any:
        key = size_key(args)
        compiled = self.compiled.get(key)
        if compiled is None:
            if len(self.compiled) >= self.config.max_specializations:
                return self._run_symbolic(*args)
            compiled = self.compiled[key] = self._specialize(key, args)
        taken = self.taken
        outputs = compiled(*args) if taken is None else compiled(*[args[i] for i in taken])
        return self._marked(outputs) if self.output_dims else outputs

    def _marked(self, outputs: Sequence[Any]) -> Sequence[Any]:
        """``outputs`` with their symbolic dimensions marked (``output_dims``)."""
        for index, dims in self.output_dims:
            _torch.mark_dynamo_propagated_dynamic_indices(outputs[index], dims)
        return outputs

    def _specialize(self, key: tuple, like: Sequence[Any]) -> Callable:
        recompiles.compiled(
            self.function,
            self.name,
            recompiles.signature(like, key, self.names),
            self.config,
            kind="size set",
            counts=bool(self.compiled),  # the first is the compile of the graph itself
        )
        static, inputs = specialize(self.gm, key, like)
        STATS["specializations"] += 1
        log.info(
            "specialising %s for sizes %s (%d so far)",
            self.name,
            _describe(key),
            len(self.compiled) + 1,
        )
        return self.compile_static(static, inputs, self.config)

    def _run_symbolic(self, *args: Any) -> Sequence[Any]:
        limit = self.config.max_specializations
        message = (
            f"{self.name} was already specialised for {limit} size sets (max_specializations="
            f"{limit}); new sizes run op by op in eager torch. Raise the limit with "
            "init_nkipy_backend(max_specializations=...) or torch.compile(..., "
            "options={'max_specializations': ...}), or pad inputs to fewer distinct sizes."
        )
        if self.config.strict:
            raise SpecializationLimitError(message)
        STATS["unspecialized_calls"] += 1
        if not self.warned:
            self.warned = True
            warnings.warn(f"nkipy: {message}", FallbackWarning, stacklevel=2)
        return self._marked(self.gm(*args))


def _describe(key: tuple) -> str:
    return ", ".join(str(tuple(k[0])) if isinstance(k, tuple) else str(k) for k in key)
