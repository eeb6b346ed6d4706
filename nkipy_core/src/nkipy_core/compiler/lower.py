"""Lowering: the rules of a fused subgraph traced into one NKIPy kernel, verified and simplified,
its outputs in the memory order torch expects of them.
"""

from __future__ import annotations

import operator
from typing import Any, cast

import torch
import torch.fx

from nkipy_core.cache.kernel_cache import STATS
from nkipy_core.compiler.kernel_call import inverse_permutation
from nkipy_core.compiler.lowering import invoke, tensor_type
from nkipy_core.compiler.plan import RULE
from nkipy_core.errors import LoweringError
from nkipy_core.ir.builder import KernelBuilder, Traced
from nkipy_core.ir.passes import simplify
from nkipy_core.ir.types import TensorType
from nkipy_core.ir.verify import verify


def output_orders(sub: torch.fx.GraphModule) -> tuple[tuple[int, ...] | None, ...]:
    """Per output of a fused subgraph: the order of its dimensions from outermost to innermost in
    memory, when its example value is a dense layout other than row-major (a transposed weight
    saved for backward); else ``None``.

    The kernel returns such an output with its dimensions in that order, row-major, and the call
    permutes it back: a view with the strides torch (and AOTAutograd's guards and
    specialisations) expect, whatever layout the runtime gives its results.
    """
    result = next(iter(sub.graph.find_nodes(op="output"))).args[0]
    return tuple(
        _dense_order(n.meta.get("val"))
        for n in (result if isinstance(result, (tuple, list)) else [result])
    )


def input_orders(sub: torch.fx.GraphModule) -> tuple[tuple[int, ...] | None, ...]:
    """Per input of a fused subgraph: the order of its dimensions in memory, outermost first,
    when its example value is a CPU tensor in a dense layout other than row-major (a transposed
    weight saved for backward, ``w.t()``); else ``None``.

    The kernel takes such an input with its dimensions in that order, row-major, and transposes
    it back first; the call passes the tensor permuted into that order, a view without a copy.
    A runtime that needs row-major arrays (XLA) then reads the tensor where it lies instead of
    copying it at every call, and a dot reads the transposed operand along its own axes. (Device
    tensors are the runtime's arrays already, whatever their strides.)"""
    return tuple(
        _dense_order(val)
        if isinstance(val := n.meta.get("val"), torch.Tensor) and val.is_cpu and val.numel()
        else None
        for n in sub.graph.find_nodes(op="placeholder")
    )


def _dense_order(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, torch.Tensor) or value.is_contiguous() or value.storage_offset() != 0:
        return None
    strides, sizes = value.stride(), value.shape
    order = tuple(sorted(range(value.dim()), key=lambda d: (-strides[d], d)))
    expected = 1  # the stride of each dimension in a dense layout of that order, innermost first
    for d in reversed(order):
        if sizes[d] > 1 and strides[d] != expected:
            return None  # overlapping or with gaps: not a permutation of a dense layout
        expected *= sizes[d]
    return order


def _value_order(value: Traced, order: tuple[int, ...]) -> tuple[int, ...]:
    """``order`` over the dims of the traced value: a complex output's real view keeps its pair
    dimension last."""
    return order if value.ndim == len(order) else (*order, len(order))


def _param(builder: KernelBuilder, val: Any, order: tuple[int, ...] | None) -> Traced:
    """A kernel parameter for an input, taken in its memory ``order`` (``input_orders``)."""
    if order is None:
        return builder.param(tensor_type(val))
    logical = tensor_type(val)
    order = order if len(logical.shape) == len(order) else (*order, len(order))  # complex pairs
    param = builder.param(TensorType(tuple(logical.shape[d] for d in order), logical.dtype))
    with builder.building("input layout"):
        return builder.emit("transpose", [param], {"perm": inverse_permutation(order)})


def lower_subgraph(sub: torch.fx.GraphModule, name: str):
    """Trace the rules of a fused subgraph into one NKIPy kernel (verified and simplified)."""
    return finish_kernel(trace_subgraph(sub, name))


def finish_kernel(kernel):
    """Simplify a traced kernel and verify the result."""
    STATS["lowered_kernels"] += 1
    kernel = simplify(kernel)
    verify(kernel)
    return kernel


def trace_subgraph(sub: torch.fx.GraphModule, name: str):
    """The kernel the rules of ``sub`` record, verified but not yet simplified."""
    builder = KernelBuilder(name)
    env: dict[torch.fx.Node, Any] = {}
    outputs: list[Traced] = []
    orders = iter(input_orders(sub))
    for node in sub.graph.nodes:
        if node.op == "placeholder":
            env[node] = _param(builder, node.meta["val"], next(orders))
        elif node.op == "call_function" and node.target is operator.getitem:
            env[node] = env[node.args[0]][node.args[1]]
        elif node.op == "call_function":
            env[node] = invoke(node.meta[RULE], node, builder, env.__getitem__)
        elif node.op == "output":
            result = node.args[0]
            results = list(result) if isinstance(result, (tuple, list)) else [result]
            outputs = [env[cast(torch.fx.Node, o)] for o in results]
        else:
            raise LoweringError(f"unexpected {node.op} node {node.name} in a fused subgraph")
    with builder.building("output layout"):
        outputs = [
            o if order is None else builder.emit("transpose", [o], {"perm": _value_order(o, order)})
            for o, order in zip(outputs, output_orders(sub))
        ]
    kernel = builder.finish(outputs)
    verify(kernel)
    return kernel
