"""What each rank's collective should give, computed from every rank's operand at once.

An oracle independent of nkipy's collective code (``numpy_support._collective``, the cpu
runtime's communicator, the StableHLO emitters): the primitive table's prose, written as NumPy
over the list of all ranks' operands. Tests compare XLA replicas and torch.distributed ranks
with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


def expected(
    prim: str, operands: Sequence[np.ndarray], groups: tuple, **params: Any
) -> list[np.ndarray]:
    """Rank r's result of ``prim`` when rank r's operand is ``operands[r]``."""
    results = []
    for rank, x in enumerate(operands):
        group = next(g for g in groups if rank in g)
        mine, members = group.index(rank), [operands[m] for m in group]
        if prim in ("all_reduce", "reduce_scatter"):
            reduced = _REDUCE[params["op"]](np.stack(members), axis=0).astype(x.dtype)
            out = (
                reduced
                if prim == "all_reduce"
                else np.split(reduced, len(group), params["axis"])[mine]
            )
        elif prim == "all_gather":
            out = np.concatenate(members, axis=params["axis"])
        elif prim == "all_to_all":
            blocks = [np.split(m, len(group), params["split_axis"])[mine] for m in members]
            out = np.concatenate(blocks, axis=params["concat_axis"])
        else:
            assert prim == "collective_broadcast", prim
            out = members[params["source"]]
        results.append(out)
    return results


#: (primitive, per-rank operand shape, params without groups): every primitive, each axis kind
CASES = [
    ("all_reduce", (2, 3), {"op": "sum"}),
    ("all_reduce", (5,), {"op": "prod"}),
    ("all_reduce", (2, 2), {"op": "max"}),
    ("all_reduce", (3,), {"op": "min"}),
    ("all_gather", (2, 3), {"axis": 0}),
    ("all_gather", (2, 3), {"axis": 1}),
    ("reduce_scatter", (4, 3), {"op": "sum", "axis": 0}),
    ("reduce_scatter", (2, 4), {"op": "max", "axis": 1}),
    ("all_to_all", (4, 2), {"split_axis": 0, "concat_axis": 1}),
    ("all_to_all", (2, 4), {"split_axis": 1, "concat_axis": 1}),
    ("collective_broadcast", (2, 3), {"source": 0}),
    ("collective_broadcast", (3,), {"source": 1}),
]


def operands(shape: tuple[int, ...], world: int, dtype: Any = np.float32) -> list[np.ndarray]:
    """Distinct small values per rank (exact in f32 under the reductions above)."""
    rng = np.random.default_rng(len(shape) * 7 + world)
    return [rng.integers(-4, 5, shape).astype(dtype) for _ in range(world)]
