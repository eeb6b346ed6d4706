"""The ``nkipy`` process group, in two real processes started by torchrun (gloo underneath).

Every collective on ``nkipy`` tensors is compared with the same collective on CPU tensors in a
plain gloo group (``pg_worker.py``). The cases of one backend string share one torchrun launch,
started once per module: each launch costs two fresh ``import torch``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torchrun import rank_results

WORKER = Path(__file__).with_name("pg_worker.py")

#: cases run in a group made by ``init_process_group("nkipy")``
NKIPY_CASES = [
    *(f"all_reduce:{op}" for op in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")),
    "all_reduce_transfers",
    "all_reduce_async",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_tensor_avg",
    "all_to_all_single",
    "all_to_all_single_uneven",
    "broadcast",
    "scatter",
    "all_gather_functional",
    "barrier",
    "cpu_tensors",
    "all_gather_coalesced_mixed_dtypes",
    "reduce_scatter_coalesced_mixed_dtypes",
    "all_reduce_avg_integers",
    "futures",
    "ddp",
    "objects",
    "all_reduce_coalesced",
    "coalescing_manager",
    "coalesced_methods",
    "premul_sum",
    "reduce",
    "gather",
    "all_to_all",
    "all_to_all_split_mismatch",
    "send_recv",
    "batch_isend_irecv",
    "send_recv_mismatch",
    "predicted",
    "mismatch_after_agreement",
    "destroy_releases_gloo",
    "mismatched_shapes",
    "missed_collective",  # last: it leaves a timed-out group behind
]
#: cases run in ``init_process_group("cpu:gloo,nkipy:nkipy")``
COMBINED_CASES = [
    "all_reduce:SUM",
    "all_gather_into_tensor",
    "broadcast",
    "scatter",
    "all_gather_functional",
    "cpu_tensors",
    "futures",
    "send_recv",
]


def _launch(backend: str, cases: list[str], out: Path) -> list[dict[str, str]]:
    # the ranks use the nkipy device: they name its runtime
    return rank_results(
        str(WORKER), backend, str(out), *cases, out=out, env={"NKIPY_RUNTIME": "cpu"}
    )


@pytest.fixture(scope="module")
def nkipy_results(tmp_path_factory):
    return _launch("nkipy", NKIPY_CASES, tmp_path_factory.mktemp("nkipy"))


@pytest.fixture(scope="module")
def combined_results(tmp_path_factory):
    return _launch("cpu:gloo,nkipy:nkipy", COMBINED_CASES, tmp_path_factory.mktemp("combined"))


def _check(results: list[dict[str, str]], case: str) -> None:
    for rank, by_case in enumerate(results):
        assert by_case.get(case) == "ok", f"rank {rank}: {by_case.get(case, 'not run')}"


@pytest.mark.parametrize("case", NKIPY_CASES)
def test_nkipy_group(nkipy_results, case):
    _check(nkipy_results, case)


@pytest.mark.parametrize("case", COMBINED_CASES)
def test_combined_group(combined_results, case):
    _check(combined_results, case)
