"""Lowerings of torch's functional collectives (``_c10d_functional``) onto the IR collectives.

Dynamo traces ``dist.all_reduce(h)`` and friends inside a compiled function into these ops, each
followed by ``wait_tensor``. Lowered, the collective is part of the kernel (one kernel for a
graph like ``relu(x @ w)`` then ``all_reduce``), instead of splitting the graph around a CPU
collective. The group a node names becomes the primitive's replica groups; a group that is not
the whole world is declined (its sibling groups, which the replica groups must also list, are
not known from one rank), so such a node runs through the process group as before.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from nkipy_core import RuleSet, Unsupported, _torch, knp

RULES = RuleSet()
c10d = torch.ops._c10d_functional

#: torch's reduce-op names -> the primitives' (``avg`` is ``sum`` divided by the group size)
_OPS = {
    "sum": "sum",
    "avg": "sum",
    "product": "prod",
    "premul_sum": None,
    "min": "min",
    "max": "max",
}


def _groups(group_name: str) -> tuple[tuple[int, ...], ...]:
    """The replica groups of a process group that spans the world; declines any other."""
    if not dist.is_initialized():
        raise Unsupported("torch.distributed is not initialised in this process")
    group = _torch.resolve_process_group(group_name)
    ranks = tuple(dist.get_process_group_ranks(group))
    if len(ranks) != dist.get_world_size():
        raise Unsupported(
            f"group {group_name!r} is a subgroup ({len(ranks)} of {dist.get_world_size()} ranks)"
        )
    return (ranks,)


def _reduce_op(name: str, x) -> str:
    op = _OPS.get(name.lower())
    if op is None:
        raise Unsupported(f"reduce op {name!r}")
    if name.lower() == "avg" and not knp.dtype_of(x).is_float:
        raise Unsupported("avg of an integer tensor")
    return op


def _averaged(name: str, x, size: int):
    return x / size if name.lower() == "avg" else x


@RULES.register(c10d.all_reduce.default)
def all_reduce(ctx, x, reduce_op, group_name):
    groups = _groups(group_name)
    return _averaged(reduce_op, knp.all_reduce(x, _reduce_op(reduce_op, x), groups), len(groups[0]))


@RULES.register(c10d.all_gather_into_tensor.default)
def all_gather_into_tensor(ctx, x, group_size, group_name):
    return knp.all_gather(x, 0, _groups(group_name))


@RULES.register(c10d.reduce_scatter_tensor.default)
def reduce_scatter_tensor(ctx, x, reduce_op, group_size, group_name):
    groups = _groups(group_name)
    scattered = knp.reduce_scatter(x, _reduce_op(reduce_op, x), 0, groups)
    return _averaged(reduce_op, scattered, len(groups[0]))


@RULES.register(c10d.all_to_all_single.default)
def all_to_all_single(ctx, x, output_split_sizes, input_split_sizes, group_name):
    groups = _groups(group_name)
    even = [x.shape[0] // len(groups[0])] * len(groups[0])
    if list(output_split_sizes or even) != even or list(input_split_sizes or even) != even:
        raise Unsupported("uneven splits")
    return knp.all_to_all(x, 0, 0, groups)


@RULES.register(c10d.broadcast.default)
def broadcast(ctx, x, src, group_name):
    groups = _groups(group_name)
    return knp.collective_broadcast(x, groups[0].index(src), groups)


@RULES.register(c10d.wait_tensor.default)
def wait_tensor(ctx, x):
    """Collectives inside a kernel complete inside it: waiting is the identity."""
    return x
