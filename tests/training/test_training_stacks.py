"""Training code written for "the accelerator" runs unchanged on ``nkipy``: DDP (eager and
compiled), FSDP2 (eager, compiled, mixed precision, activation checkpointing), distributed checkpointing, pipeline
parallelism and expert-parallel MoE, each the same training as on CPU/gloo.

``training_worker.py`` names neither device nor backend; it is launched twice with torchrun
(2 ranks): once as on any CPU machine, once with ``NKIPY_RUNTIME=cpu``, which makes ``nkipy``
torch's accelerator and its process group the default. Every case's losses and final
parameters must agree between the two runs. The device runs each op as a NumPy kernel, so they
agree to float rounding, not bit for bit (bf16 parameters: to bf16's precision).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torchrun import RANKS, torchrun

WORKER = Path(__file__).with_name("training_worker.py")

CASES = [
    "ddp",
    "ddp_compiled",
    "ddp_fp16_hook",
    "fsdp2",
    "fsdp2_no_reshard",
    "fsdp2_bf16",
    "fsdp2_compiled",
    "fsdp2_checkpointed",
    "checkpoint_rng",
    "dcp_resume",
    "pipeline_gpipe",
    "pipeline_1f1b",
    "moe",
]
#: how close the two runs must be: float32 steps differ in summation order only
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
#: bf16 parameters round each step to 8 mantissa bits
BF16_TOLERANCE = {"rtol": 2e-2, "atol": 2e-3}


def _launch(out: Path, runtime: str | None) -> list[dict]:
    done = torchrun(str(WORKER), str(out), *CASES, timeout=900, env={"NKIPY_RUNTIME": runtime})
    paths = [out / f"rank{rank}.json" for rank in range(RANKS)]
    if not all(p.exists() for p in paths):
        pytest.fail(f"torchrun exited {done.returncode} without results:\n{done.stderr[-4000:]}")
    return [json.loads(p.read_text()) for p in paths]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, list[dict]]:
    return {
        "cpu": _launch(tmp_path_factory.mktemp("cpu"), None),
        "nkipy": _launch(tmp_path_factory.mktemp("nkipy"), "cpu"),
    }


def _case(runs, device: str, name: str) -> list[dict]:
    results = [rank[name] for rank in runs[device]]
    errors = [r["error"] for r in results if "error" in r]
    assert not errors, f"{name} on {device}:\n" + "\n".join(errors)
    return results


def test_each_run_trains_on_the_accelerator_torch_names(runs):
    assert [r["device"] for r in runs["cpu"]] == ["cpu"] * RANKS
    assert [r["device"] for r in runs["nkipy"]] == ["nkipy"] * RANKS


@pytest.mark.parametrize("name", [c for c in CASES if c != "checkpoint_rng"])
def test_training_on_nkipy_matches_cpu_gloo(runs, name):
    tolerance = BF16_TOLERANCE if "bf16" in name else TOLERANCE
    reference, device = _case(runs, "cpu", name), _case(runs, "nkipy", name)
    for rank, (want, got) in enumerate(zip(reference, device)):
        assert len(got["losses"]) == len(want["losses"])
        assert got["losses"] == pytest.approx(
            want["losses"], rel=tolerance["rtol"], abs=tolerance["atol"]
        ), rank
        for key in ("params", "resumed"):
            if key not in want:
                continue
            if key == "resumed":
                assert got[key] == pytest.approx(
                    want[key], rel=tolerance["rtol"], abs=tolerance["atol"]
                )
                continue
            for param, values in want[key].items():
                assert got[key][param] == pytest.approx(
                    values, rel=tolerance["rtol"], abs=tolerance["atol"]
                ), f"rank {rank} {param}"


@pytest.mark.parametrize("device", ["cpu", "nkipy"])
def test_a_resumed_checkpoint_continues_the_same_training(runs, device):
    for result in _case(runs, device, "dcp_resume"):
        assert result["resumed"] == result["losses"][2:]


@pytest.mark.parametrize("device", ["cpu", "nkipy"])
def test_checkpointing_replays_the_dropout_masks(runs, device):
    assert all(r["same_gradients"] for r in _case(runs, device, "checkpoint_rng"))
