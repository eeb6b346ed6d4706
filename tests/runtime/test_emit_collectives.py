"""The StableHLO emitters of the collectives, run by XLA on this machine's CPU with several
replicas in one (child) process, against an oracle over all replicas' operands
(``collective_oracle``) and against the primitives' NumPy semantics at group size one.

The multi-replica runs are XLA's CPU collectives, not Neuron's: the HLO is what neuronx-cc
would read, but no Trainium compile or run happens here.
"""

from __future__ import annotations

import numpy as np
import pytest
from collective_oracle import CASES, expected, operands
from op_kernels import one_op
from xla_oracle import assert_same

pytest.importorskip("jax", reason="the xla oracle needs the nkipy-runtime[xla] extra (jax, jaxlib)")

from xla_replicas import ReplicaPool  # noqa: E402

from nkipy_runtime.stablehlo import emit_module  # noqa: E402

#: replica groups: the whole world, the world listed out of order, and two groups of two
#: whose ranks interleave and are listed in descending order in one group
GROUPS = [((0, 1),), ((1, 0),), ((0, 2), (3, 1))]


@pytest.fixture(scope="module")
def pool():
    replicas = ReplicaPool()
    yield replicas
    replicas.close()


def _case_id(case) -> str:
    prim, shape, params = case
    return f"{prim}-{'x'.join(map(str, shape))}-" + "-".join(f"{k}={v}" for k, v in params.items())


@pytest.mark.parametrize("groups", GROUPS, ids=str)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_replicas_agree_with_oracle(pool, case, groups):
    prim, shape, params = case
    world = sum(len(g) for g in groups)
    xs = operands(shape, world)
    kernel = one_op(prim, [xs[0]], groups=groups, **params)
    got = pool.run(emit_module(kernel), [[x] for x in xs])
    for rank, (outs, want) in enumerate(
        zip(got, expected(prim, xs, groups, **params), strict=True)
    ):
        assert outs[0].dtype == want.dtype and outs[0].shape == want.shape, (
            rank,
            outs[0].shape,
            want.shape,
        )
        np.testing.assert_array_equal(outs[0], want, err_msg=f"replica {rank}")


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.uint8])
def test_all_reduce_types(pool, dtype):
    """The combiner region is typed like the operand (integers, wide floats, unsigned)."""
    groups = ((0, 1),)
    xs = operands((3, 2), 2, dtype)
    kernel = one_op("all_reduce", [xs[0]], op="sum", groups=groups)
    got = pool.run(emit_module(kernel), [[x] for x in xs])
    for outs, want in zip(got, expected("all_reduce", xs, groups, op="sum"), strict=True):
        np.testing.assert_array_equal(outs[0], want)
        assert outs[0].dtype == want.dtype


#: at group size one only position 0 exists
_SOURCE_ZERO = [c for c in CASES if c[2].get("source", 0) == 0]


@pytest.mark.parametrize("case", _SOURCE_ZERO, ids=_case_id)
def test_single_replica_groups_match_cpu_runtime(case):
    """Groups of one rank: XLA (one device) gives what the NumPy reference gives, the identity."""
    prim, shape, params = case
    x = operands(shape, 1)[0]
    assert_same(one_op(prim, [x], groups=((0,),), **params), [x])


def test_broadcast_keeps_bits(pool):
    """A broadcast moves data, so -0.0 and NaN payloads arrive unchanged."""
    groups = ((0, 1),)
    xs = [
        np.array([-0.0, np.nan, 1.0], dtype=np.float32),
        np.array([0.0, 2.0, -np.inf], dtype=np.float32),
    ]
    xs[0].view(np.uint32)[1] |= 0x1234  # a NaN payload
    kernel = one_op("collective_broadcast", [xs[0]], source=0, groups=groups)
    got = pool.run(emit_module(kernel), [[x] for x in xs])
    for outs, want in zip(got, expected("collective_broadcast", xs, groups, source=0), strict=True):
        assert outs[0].tobytes() == want.tobytes()
