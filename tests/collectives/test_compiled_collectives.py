"""Collectives inside kernels: torch.distributed calls in compiled functions become IR
collectives in the same kernel, run by the cpu runtime through the ``nkipy`` process group, in two
real processes (torchrun). Each compiled result equals the eager one on every rank, with one
kernel and no op left on CPU; and the example of examples/distributed runs."""

from __future__ import annotations

from pathlib import Path

import compiled_collectives_worker
import pytest
from compiled_collectives_worker import CASES
from torchrun import rank_results, torchrun

WORKER = compiled_collectives_worker.__file__
EXAMPLE = Path(__file__).parents[2] / "examples" / "distributed" / "mlp.py"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("compiled")
    return rank_results(WORKER, "cpu", str(out), *CASES, out=out)


@pytest.mark.parametrize("case", sorted(CASES))
def test_collective_runs_inside_one_kernel_and_matches_eager(results, case):
    for rank, by_case in enumerate(results):
        outcome = by_case[case]
        assert isinstance(outcome, dict), f"rank {rank}:\n{outcome}"
        assert outcome == {"kernels": 1, "fallbacks": []}, f"rank {rank}"


def test_the_distributed_mlp_example_is_one_kernel():
    done = torchrun(str(EXAMPLE))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ranks 2: matches the single-process MLP; kernels 1; ops on CPU 0" in done.stdout
