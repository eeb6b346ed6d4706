"""Collectives inside kernels: torch.distributed calls in compiled functions become IR
collectives in the same kernel, run by the cpu runtime through the ``nkipy`` process group, in two
real processes (torchrun). Each compiled result equals the eager one on every rank, with one
kernel and no op left on CPU; and the example of examples/distributed runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiled_worker import CASES

WORKER = Path(__file__).with_name("compiled_worker.py")
EXAMPLE = Path(__file__).parents[2] / "examples" / "distributed" / "mlp.py"


def torchrun(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("compiled")
    done = torchrun(str(WORKER), str(out), *CASES)
    paths = [out / f"rank{rank}.json" for rank in range(2)]
    if not all(p.exists() for p in paths):
        pytest.fail(f"torchrun exited {done.returncode} without results:\n{done.stdout}\n{done.stderr}")
    return [json.loads(p.read_text()) for p in paths]


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
