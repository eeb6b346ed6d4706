"""The collective primitives: type rules, NumPy semantics without a communicator (identity
for one-rank groups, a clear error otherwise), and the cpu runtime running them through
torch.distributed (gloo) in real spawned processes, checked against an oracle over all ranks'
operands (``collective_oracle``) and against torch.distributed's own collectives."""

from __future__ import annotations

import numpy as np
import pytest
from collective_oracle import CASES, expected, operands
from collective_ranks import run_ranks

from nkipy_core import knp
from nkipy_core.errors import CollectiveError
from nkipy_core.ir import DType, KernelBuilder, TensorType, codegen
from nkipy_core.ir.passes import constant_folding
from nkipy_core.ir.primitives import infer
from nkipy_core.runtime.communicator import TorchDistributedCommunicator

F32 = DType.f32
PAIR = ((0, 1),)


def _type(*shape: int, dtype: DType = F32) -> TensorType:
    return TensorType(shape, dtype)


@pytest.mark.parametrize(
    ("prim", "params", "result"),
    [
        ("all_reduce", {"op": "sum", "groups": PAIR}, (4, 6)),
        ("all_gather", {"axis": 1, "groups": PAIR}, (4, 12)),
        ("all_gather", {"axis": 0, "groups": ((0, 1, 2), (3, 4, 5))}, (12, 6)),
        ("reduce_scatter", {"op": "max", "axis": 0, "groups": PAIR}, (2, 6)),
        ("all_to_all", {"split_axis": 1, "concat_axis": 0, "groups": PAIR}, (8, 3)),
        ("all_to_all", {"split_axis": 1, "concat_axis": 1, "groups": PAIR}, (4, 6)),
        ("collective_broadcast", {"source": 1, "groups": ((1, 0), (2, 3))}, (4, 6)),
    ],
)
def test_result_types(prim, params, result):
    assert infer(prim, [_type(4, 6)], params) == _type(*result)


@pytest.mark.parametrize(
    ("prim", "operand", "params", "message"),
    [
        ("all_reduce", _type(4), {"op": "sum", "groups": ((0, 1), (2,))}, "differ in size"),
        ("all_reduce", _type(4), {"op": "sum", "groups": ((0, 2),)}, "once each"),
        ("all_reduce", _type(4), {"op": "sum", "groups": ((0, 0),)}, "once each"),
        ("all_reduce", _type(4), {"op": "sum", "groups": ()}, "non-empty"),
        ("all_reduce", _type(4), {"op": "mean", "groups": PAIR}, "op must be one of"),
        ("all_reduce", _type(4, dtype=DType.bool), {"op": "max", "groups": PAIR}, "numeric"),
        ("all_gather", _type(4), {"axis": 1, "groups": PAIR}, "out of range"),
        (
            "reduce_scatter",
            _type(3, 2),
            {"op": "sum", "axis": 0, "groups": PAIR},
            "does not divide",
        ),
        (
            "all_to_all",
            _type(4, 3),
            {"split_axis": 1, "concat_axis": 0, "groups": PAIR},
            "does not divide",
        ),
        (
            "all_to_all",
            _type(4, 2),
            {"split_axis": 1, "concat_axis": 2, "groups": PAIR},
            "out of range",
        ),
        ("collective_broadcast", _type(4), {"source": 2, "groups": PAIR}, "not a position"),
    ],
)
def test_type_errors(prim, operand, params, message):
    with pytest.raises(TypeError, match=message):
        infer(prim, [operand], params)


SINGLE = ((0,), (1,), (2,))  # three ranks, each alone in its group


@pytest.mark.parametrize(
    ("prim", "shape", "params"), [c for c in CASES if c[2].get("source", 0) == 0]
)
def test_one_rank_groups_are_the_identity(prim, shape, params):
    """Without a communicator (NumPy mode of knp, a standalone kernel.py) a one-rank group needs
    no peer: every collective returns its operand."""
    x = operands(shape, 1)[0]
    np.testing.assert_array_equal(getattr(knp, prim)(x, groups=SINGLE, **params), x)
    kb = KernelBuilder(prim)
    traced = kb.param(TensorType(shape, F32))
    kernel = kb.finish([getattr(knp, prim)(traced, groups=SINGLE, **params)])
    (out,) = codegen.load(codegen.generate(kernel))(x)
    np.testing.assert_array_equal(out, x)


def test_missing_communicator_is_named():
    x = np.ones(4, np.float32)
    with pytest.raises(RuntimeError, match="no communicator is installed.*init_process_group"):
        knp.all_reduce(x, "sum", PAIR)


def test_cpu_communicator_without_process_group():
    """The cpu runtime's communicator says what to initialise when torch.distributed is not."""
    with pytest.raises(CollectiveError, match=r"init_process_group\('gloo'\)"):
        TorchDistributedCommunicator()("all_reduce", np.ones(4, np.float32), PAIR, op="sum")


def test_collectives_never_fold():
    """A collective of a constant still depends on the other ranks, so it stays in the kernel."""
    kb = KernelBuilder("fold")
    kb.param(_type(2))
    with kb.building("test"):
        out = knp.all_reduce(knp.full((2,), 1.0, F32) + knp.full((2,), 2.0, F32), "sum", PAIR)
    kernel = constant_folding(kb.finish([out]))
    assert [op.prim for op in kernel.ops][-1] == "all_reduce"


#: the whole world in rank order, the same ranks listed in reverse (order matters for
#: all_gather, reduce_scatter, all_to_all and broadcast)
GROUPS_2 = [((0, 1),), ((1, 0),)]


def _check_ranks(world: int, groups_list: list, tmp_path) -> None:
    reports = run_ranks(world, str(tmp_path / "store"), groups_list)
    cases = [(groups, case) for groups in groups_list for case in CASES]
    for i, (groups, (prim, shape, params)) in enumerate(cases):
        want = expected(prim, operands(shape, world), groups, **params)
        for rank in range(world):
            got, direct = reports[rank][i]
            where = f"rank {rank}: {prim} {params} over {groups}"
            np.testing.assert_array_equal(got, want[rank], err_msg=where)
            assert got.dtype == np.float32, where
            if direct is not None:
                np.testing.assert_array_equal(got, direct, err_msg=f"{where} vs torch.distributed")


def test_cpu_runtime_over_gloo_two_ranks(tmp_path):
    _check_ranks(2, GROUPS_2, tmp_path)


def test_cpu_runtime_over_gloo_subgroups(tmp_path):
    """Four ranks in two interleaved groups, one listed in descending order: torch subgroups."""
    _check_ranks(4, [((0, 2), (3, 1))], tmp_path)
