"""Lowering one FX node with one rule: argument mapping, rule invocation and result checking.

This is the only place that calls lowering rules, so it is where a rule's mistakes are caught
and attributed: a result of the wrong shape or dtype becomes a ``VerificationError`` naming the
rule and the op, and ``Unsupported`` declines the node for the next provider.

A complex tensor is traced as its real view (``value_type``: ``complex64[n]`` is ``f32[n x 2]``).
A rule written for real numbers would compute nonsense on those pairs (a product of pairs is not
a complex product, a trailing dimension of 2 shifts negative dims), so only rules registered with
``complex=True`` ever see a node with a complex input or result (``touches_complex``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from nkipy_core import knp
from nkipy_core.compiler.rng import STREAM_BLOCKS, RandomStream, split_kwargs
from nkipy_core.errors import Unsupported, VerificationError
from nkipy_core.ir.builder import KernelBuilder, Traced, constant
from nkipy_core.ir.types import DType, TensorType, value_type
from nkipy_core.plugin.registry import LoweringRule, op_name

TensorTypes = TensorType | tuple[Any, ...]


@attrs.frozen
class Layout:
    """Where a tensor argument's elements sit in its storage, from the node's fake tensor.

    A kernel sees every operand as a dense row-major array; the few ops whose meaning depends
    on the storage itself (``as_strided``) read this to check that the two agree.
    """

    stride: tuple[int, ...]
    storage_offset: int
    contiguous: bool
    #: an input of the compiled graph: its storage offset is the traced call's, and dynamo does
    #: not guard it, so a later call may bring another (strides and sizes are guarded)
    graph_input: bool = False

    @classmethod
    def of(cls, val: Any, graph_input: bool = False) -> Layout | None:
        if not isinstance(val, torch.Tensor) or val.layout != torch.strided:
            return None
        try:
            return cls(
                tuple(int(s) for s in val.stride()),
                int(val.storage_offset()),
                bool(val.is_contiguous()),
                graph_input,
            )
        except (TypeError, RuntimeError):  # symbolic strides
            return None

    @classmethod
    def of_node(cls, node: Any) -> Layout | None:
        """The layout of an FX argument (``None`` for a non-node); ``GRAPH_INPUT`` in its meta
        marks an input of the graph being compiled, and survives partitioning."""
        if not isinstance(node, torch.fx.Node):
            return None
        return cls.of(node.meta.get("val"), bool(node.meta.get(GRAPH_INPUT)))


#: node.meta key on the placeholders of a graph given to ``compile_graph`` (copied onto the
#: placeholders of its fused subgraphs), read by ``Layout.of_node``
GRAPH_INPUT = "nkipy_graph_input"


@attrs.frozen
class LoweringContext:
    """What a rule may want besides its arguments: the op, the node, the expected output types
    and the storage layouts of the positional tensor arguments (``None`` where not a tensor)."""

    op: Any
    node_name: str
    out: TensorTypes
    #: the node's random stream (its key input and counter stream), for random ops only
    rng: RandomStream | None = None
    layouts: tuple[Layout | None, ...] = ()
    #: whether the node has complex tensors among its inputs or results (only rules registered
    #: with ``complex=True`` see such a node); each is traced as its real view, ``[..., 2]``
    complex: bool = False
    #: for a complex node, per positional argument: whether it is a complex tensor (a list
    #: argument gets a tuple)
    complex_args: tuple[Any, ...] = ()
    #: whether the (first) result is complex: ``out`` is then its real view's type
    complex_out: bool = False

    @property
    def out_dtype(self) -> DType:
        """Element type of the (first) result: what torch's type promotion decided."""
        first = self.out if isinstance(self.out, TensorType) else self.out[0]
        return first.dtype

    def random_bits(self, shape: tuple[int, ...]) -> Any:
        """u32 random words of ``shape`` for this node: the same for the same key, different
        for every other node and call. Declines the node if it has no random key (e.g. in a
        graph the backend did not prepare). Draw once per node; for several independent values
        per element ask for a leading dimension (``(2, *shape)``) and index it."""
        if self.rng is None:
            raise Unsupported(
                "a random op without a random key (not prepared by the nkipy backend)"
            )
        if math.prod(shape) > 4 * STREAM_BLOCKS:
            raise Unsupported(
                f"{math.prod(shape)} random values in one draw, more than a random op's "
                f"{4 * STREAM_BLOCKS} (its counter range)"
            )
        return knp.random_bits(self.rng.state(), shape)


def tensor_type(val: Any) -> TensorType:
    """The static type of a fake tensor from node metadata; ``Unsupported`` if it has none."""
    if not isinstance(val, torch.Tensor):
        raise Unsupported(f"a non-tensor value ({type(val).__name__})")
    if val.layout != torch.strided:
        raise Unsupported(f"a {val.layout} tensor (only dense tensors are lowered)")
    if not all(isinstance(d, int) for d in val.shape):
        # graphs whose sizes all follow from their inputs' are specialised before lowering
        if free_unbacked_symbols(val):
            raise Unsupported(
                "a data-dependent shape (its size depends on tensor values, so no static kernel fits it)"
            )
        raise Unsupported(
            "a symbolic shape in a graph that also has data-dependent sizes, so it is not specialised"
        )
    try:
        return value_type(val.shape, val.dtype)
    except TypeError:
        raise Unsupported(f"dtype {val.dtype}") from None


def _is_complex(value: Any) -> Any:
    """Whether an FX argument is a complex tensor (a tuple for a list argument)."""
    if isinstance(value, torch.fx.Node):
        val = value.meta.get("val")
        return isinstance(val, torch.Tensor) and val.is_complex()
    if isinstance(value, (tuple, list)):
        return tuple(_is_complex(v) for v in value)
    return False


def _any(flags: Any) -> bool:
    return any(_any(f) for f in flags) if isinstance(flags, tuple) else bool(flags)


def touches_complex(node: torch.fx.Node) -> bool:
    """Whether a node has a complex tensor among its inputs or results (only rules registered
    with ``complex=True`` lower it)."""
    val = node.meta.get("val")
    results = val if isinstance(val, (tuple, list)) else (val,)
    if any(isinstance(v, torch.Tensor) and v.is_complex() for v in results):
        return True
    return _any(_is_complex(tuple(node.args))) or _any(_is_complex(tuple(node.kwargs.values())))


def output_types(node: torch.fx.Node) -> TensorTypes:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        return tuple(tensor_type(v) if v is not None else None for v in val)
    return tensor_type(val)


def map_args(node: torch.fx.Node, lookup: Callable[[torch.fx.Node], Any]) -> tuple[tuple, dict]:
    """The node's arguments with every input node replaced by ``lookup(node)``."""
    return torch.fx.node.map_arg((node.args, node.kwargs), lookup)


def _as_traced(builder: KernelBuilder, value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return constant(builder, value, DType.from_numpy(value.dtype))
    return value


def invoke(rule: LoweringRule, node: torch.fx.Node, builder: KernelBuilder, lookup) -> Any:
    """Run ``rule`` on ``node`` inside ``builder``; check its results against the node's types.
    A node with complex tensors is declined unless the rule is registered for them."""
    complex_node = touches_complex(node)
    if complex_node and not rule.complex:
        raise Unsupported("complex tensors (the rule computes on real numbers)")
    expected = output_types(node)
    layouts = tuple(Layout.of_node(a) for a in node.args)
    args, kwargs = map_args(node, lookup)
    kwargs, stream = split_kwargs(kwargs)
    ctx = LoweringContext(
        node.target,
        node.name,
        expected,
        rng=stream,
        layouts=layouts,
        complex=complex_node,
        complex_args=_is_complex(tuple(node.args)) if complex_node else (),
        complex_out=complex_node and _is_complex_result(node),
    )
    origin = f"{op_name(node.target)} via {rule.qualname}"
    with builder.building(origin):
        try:
            result = rule.fn(ctx, *args, **kwargs)
        except VerificationError as exc:
            raise VerificationError(f"{exc} [lowering rule {rule.describe()}]") from None
        if isinstance(expected, tuple):
            if not isinstance(result, (tuple, list)) or len(result) != len(expected):
                raise VerificationError(
                    f"lowering rule {rule.describe()} for {op_name(node.target)} must return "
                    f"{len(expected)} results, returned {_describe(result)}"
                )
            result = tuple(_as_traced(builder, r) for r in result)
            for i, (r, t) in enumerate(zip(result, expected)):
                if t is not None:
                    _check_result(rule, node, r, t, f" (result {i})")
        else:
            result = _as_traced(builder, result)
            _check_result(rule, node, result, expected, "")
    return result


def _is_complex_result(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    first = val[0] if isinstance(val, (tuple, list)) else val
    return isinstance(first, torch.Tensor) and first.is_complex()


def _describe(value: Any) -> str:
    if isinstance(value, Traced):
        return str(value.value.type)
    if isinstance(value, (tuple, list)):
        return f"{len(value)} values"
    return type(value).__name__


def _check_result(rule: LoweringRule, node, result: Any, expected: TensorType, which: str) -> None:
    got = result.value.type if isinstance(result, Traced) else None
    if got != expected:
        raise VerificationError(
            f"lowering rule {rule.describe()} for {op_name(node.target)}{which} returned "
            f"{_describe(result)}, but the op produces {expected} (node {node.name}). "
            "The rule is wrong: report it to the pack that provides it."
        )
