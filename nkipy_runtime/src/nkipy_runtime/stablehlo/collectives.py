"""Emitters of the collective primitives: ``all_reduce``, ``all_gather``, ``reduce_scatter``,
``all_to_all`` and ``collective_broadcast``, as the StableHLO ops of the same names.

The IR's ``groups`` become ``replica_groups`` unchanged: a group's ranks are replica ids, and
the order a group lists them is the order StableHLO gathers, scatters and exchanges blocks in,
as the NumPy reference does. No channel handle is written, so the collectives are
cross-replica (one program per rank, which is how Neuron runs a data- or tensor-parallel
NEFF).

``collective_broadcast`` is an ``all_gather`` of the operand along a new leading axis, sliced at
``source``: XLA's CPU backend has no ``collective-broadcast`` ("not supported by XLA:CPU
ThunkEmitter" in jaxlib 0.10), so the native op could not be checked here, while the gather is
checked and keeps every bit (a masked sum would turn -0.0 into 0.0). It moves group-size times
the data of a broadcast; broadcasts are rare (parameter synchronisation), so that is the trade.
"""

from __future__ import annotations

from nkipy_core.ir import TensorType

from .builder import FunctionBuilder, Val
from .reductions import reduction_region
from .registry import EMITTERS, emits


def _replica_groups(groups: tuple) -> str:
    rows = ", ".join("[" + ", ".join(str(int(r)) for r in g) + "]" for g in groups)
    return f"dense<[{rows}]> : tensor<{len(groups)}x{len(groups[0])}xi64>"


@emits("all_reduce")
def _all_reduce(b: FunctionBuilder, result: TensorType, x: Val, *, op: str, groups: tuple) -> Val:
    return b.op(
        "stablehlo.all_reduce",
        [x],
        result,
        {"replica_groups": _replica_groups(groups)},
        regions=[reduction_region(b, op, x.dtype)],
    )


@emits("all_gather")
def _all_gather(b: FunctionBuilder, result: TensorType, x: Val, *, axis: int, groups: tuple) -> Val:
    return b.op(
        "stablehlo.all_gather",
        [x],
        result,
        {"all_gather_dim": f"{axis} : i64", "replica_groups": _replica_groups(groups)},
    )


@emits("reduce_scatter")
def _reduce_scatter(
    b: FunctionBuilder, result: TensorType, x: Val, *, op: str, axis: int, groups: tuple
) -> Val:
    return b.op(
        "stablehlo.reduce_scatter",
        [x],
        result,
        {"scatter_dimension": f"{axis} : i64", "replica_groups": _replica_groups(groups)},
        regions=[reduction_region(b, op, x.dtype)],
    )


@emits("all_to_all")
def _all_to_all(
    b: FunctionBuilder,
    result: TensorType,
    x: Val,
    *,
    split_axis: int,
    concat_axis: int,
    groups: tuple,
) -> Val:
    return b.op(
        "stablehlo.all_to_all",
        [x],
        result,
        {
            "split_dimension": f"{split_axis} : i64",
            "concat_dimension": f"{concat_axis} : i64",
            "split_count": f"{len(groups[0])} : i64",
            "replica_groups": _replica_groups(groups),
        },
    )


@emits("collective_broadcast")
def _collective_broadcast(
    b: FunctionBuilder, result: TensorType, x: Val, *, source: int, groups: tuple
) -> Val:
    size = len(groups[0])
    stacked = TensorType((size, *x.shape), x.dtype)
    gathered = _all_gather(b, stacked, b.reshape(x, (1, *x.shape)), axis=0, groups=groups)
    picked = EMITTERS["slice"](
        b,
        TensorType((1, *x.shape), x.dtype),
        gathered,
        start=(source,) + (0,) * x.type.rank,
        limit=(source + 1, *x.shape),
        stride=(1,) * stacked.rank,
    )
    return b.reshape(picked, x.shape)
