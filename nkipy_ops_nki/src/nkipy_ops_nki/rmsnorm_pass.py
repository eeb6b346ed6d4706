"""An FX pass that puts the ``nkipy_nki::rms_norm`` op where a graph computes RMSNorm.

It matches what ``LlamaRMSNorm`` and ``F.rms_norm`` decompose to, in float32 (casts around it are
left alone, so a half-precision model keeps its roundings)::

    w * (x * rsqrt(mean(x ** 2, dim=-1, keepdim=True) + eps))      # either operand order

and replaces it when the intermediate values have no other users (in a training graph the
backward saves them, so the pattern stays and the base rules lower it). ``x`` is viewed as
``[rows, cols]`` around the op, since the kernel is two-dimensional.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
import torch.fx

from .kernels import rmsnorm

aten = torch.ops.aten
_ADD = (aten.add.Tensor, aten.add.Scalar)


def rmsnorm_pass(gm: torch.fx.GraphModule) -> None:
    for node in list(gm.graph.find_nodes(op="call_function", target=aten.rsqrt.default)):
        match = _match(node)
        if match is not None:
            _replace(gm, *match)
    gm.graph.eliminate_dead_code()
    gm.recompile()


def _only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _other(node: torch.fx.Node, one: Any) -> Any:
    """The operand of a binary ``node`` that is not ``one``."""
    a, b = node.args[:2]
    return b if a is one else a if b is one else None


def _match(
    rsqrt: torch.fx.Node,
) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node, float] | None:
    """(x, w, the node computing the result, eps) if ``rsqrt`` is the heart of an RMSNorm."""
    add = rsqrt.args[0]
    if not (isinstance(add, torch.fx.Node) and add.target in _ADD and _only_user(add) is rsqrt):
        return None
    mean, eps = add.args[:2]
    if not (
        isinstance(mean, torch.fx.Node)
        and mean.target is aten.mean.dim
        and isinstance(eps, float)
        and _only_user(mean) is add
    ):
        return None
    square, dims, keepdim = (*mean.args, False)[:3]
    if not (
        isinstance(square, torch.fx.Node)
        and square.target is aten.pow.Tensor_Scalar
        and square.args[1] == 2
        and keepdim
        and _only_user(square) is mean
    ):
        return None
    x = square.args[0]
    val = x.meta.get("val")
    if not (
        isinstance(val, torch.Tensor)
        and val.dtype == torch.float32
        and val.dim() >= 1
        and [d % val.dim() for d in dims] == [val.dim() - 1]
    ):
        return None
    normed = _only_user(rsqrt)
    if normed is None or normed.target is not aten.mul.Tensor or _other(normed, rsqrt) is not x:
        return None
    scaled = _only_user(normed)
    if scaled is None or scaled.target is not aten.mul.Tensor:
        return None
    w = _other(scaled, normed)
    wval = w.meta.get("val") if isinstance(w, torch.fx.Node) else None
    if not (
        isinstance(wval, torch.Tensor)
        and wval.dtype == torch.float32
        and tuple(wval.shape) == (val.shape[-1],)
    ):
        return None
    if rmsnorm.supports((math.prod(val.shape[:-1]), val.shape[-1]), torch.float32) is not None:
        return None
    return x, w, scaled, eps


def _replace(
    gm: torch.fx.GraphModule, x: torch.fx.Node, w: torch.fx.Node, result: torch.fx.Node, eps: float
) -> None:
    shape = list(x.meta["val"].shape)
    flat = [math.prod(shape[:-1]), shape[-1]]
    graph = gm.graph
    with graph.inserting_before(result):
        x2 = graph.call_function(aten.view.default, (x, flat))
        val = x.meta["val"]
        # the graph's fake tensors may be of another fake mode than the active one
        with getattr(val, "fake_mode", None) or contextlib.nullcontext():
            x2.meta["val"] = val.view(flat)
        y2 = graph.call_function(torch.ops.nkipy_nki.rms_norm.default, (x2, w, eps))
        y2.meta["val"] = x2.meta[
            "val"
        ]  # same shape and dtype; w's fake tensor may be of another fake mode
        y = graph.call_function(aten.view.default, (y2, shape))
        y.meta["val"] = result.meta["val"]
    result.replace_all_uses_with(y)
