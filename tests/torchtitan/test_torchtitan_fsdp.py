"""TorchTitan trains its Llama-3 debug model with FSDP over 2 ranks on the ``nkipy`` device as on
CPU/gloo: the same loss and gradient norm at every step.

Three launches of TorchTitan's own trainer (``examples/torchtitan``):

1. a seed checkpoint, on CPU in one process: TorchTitan's way to give runs of different
   parallelism or devices the same initial weights (random init differs between devices: CPU's
   generator on one side, the device's Philox generator under DTensor on the other);
2. the reference: 2 ranks on CPU, FSDP over gloo, from the seed checkpoint;
3. the same on ``nkipy``: ``NKIPY_RUNTIME=cpu`` makes the device torch's accelerator, TorchTitan
   picks it and torch's default backend for it (``nkipy``), with no code change.

Tolerance: the runs are float32 throughout (``mixed_precision_param=float32``), deterministic and
see the same batches, so they differ only by the rounding of the device's kernels (NumPy on the
``cpu`` runtime) against ATen's CPU kernels, carried through a few AdamW steps. Those differences
stay below 1e-4 in the loss here; ``LOSS_ATOL = 1e-3`` leaves room for other runtimes' orders of
summation and still catches a wrong step: one AdamW step moves this model's loss by 0.2-0.7, and
an optimizer step taken with a wrong learning rate or without the other rank's gradients moves
it by more than 1e-2. Adam (and TorchTitan's gradient clipping) hide a gradient that is off by a
constant factor from the loss, so the gradient norm before clipping is compared as well
(``GRAD_NORM_RTOL``): a reduction that sums where it should average doubles it.

Needs ``pip install -c constraints.txt torchtitan triton`` (see examples/torchtitan/README.md);
skipped without them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torchrun import torchrun

EXAMPLE = Path(__file__).parents[2] / "examples" / "torchtitan"
STEPS = 5
LOSS_ATOL = 1e-3
GRAD_NORM_RTOL = 1e-3
#: seconds each launch may take (CPU: ~50-90 s, nkipy on the cpu runtime: ~80-110 s on 2 cores)
TIMEOUT = 600

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchtitan") is None or importlib.util.find_spec("triton") is None,
    reason="needs torchtitan and triton (TorchTitan 0.3 imports triton): "
    "pip install -c constraints.txt torchtitan triton",
)

_STEP = re.compile(r"step:\s*(\d+)\s+loss:\s*([-\d.]+)\s+grad_norm:\s*([-\d.]+)")
_COLOR = re.compile(r"\x1b\[[0-9;]*m")


def _env(**extra: str) -> dict[str, str | None]:
    """The ranks' environment: the example's modules importable, no runtime named unless asked."""
    path = os.pathsep.join([str(EXAMPLE), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"NKIPY_RUNTIME": None, "PYTHONPATH": path, **extra}


def _launch(
    ranks: int, args: list[str], env: dict[str, str | None], device: str | None = None
) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = torchrun(
        str(EXAMPLE / "run.py"),
        *(["--device", device] if device else []),
        "--",
        "--module",
        "titan_llama3",
        "--config",
        "llama3_debugmodel_sdpa",
        "--parallelism.spmd_backend",
        "partial_dtensor",
        "--metrics.disable_color_printing",
        *args,
        timeout=TIMEOUT,
        env=env,
        ranks=ranks,
    )
    return done, time.monotonic() - start


def _steps(done: subprocess.CompletedProcess, what: str) -> dict[int, tuple[float, float]]:
    """Rank 0's ``step: N loss: L grad_norm: G`` lines (every rank logs the same global values)."""
    found: dict[int, tuple[float, float]] = {}
    for line in _COLOR.sub("", done.stdout + done.stderr).splitlines():
        m = _STEP.search(line)
        if m:
            found.setdefault(int(m[1]), (float(m[2]), float(m[3])))
    if done.returncode != 0 or len(found) != STEPS:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-60:])
        pytest.fail(f"{what}: exit {done.returncode}, {len(found)}/{STEPS} steps logged\n{tail}")
    return found


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("titan")
    subprocess.run(
        [sys.executable, str(EXAMPLE / "make_assets.py"), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
def seed_checkpoint(assets: Path) -> Path:
    dump = assets / "seed"
    done, _ = _launch(
        1,
        [
            "--parallelism.data_parallel_shard_degree",
            "1",
            "--checkpoint.enable",
            "--checkpoint.create_seed_checkpoint",
        ],
        _env(TITAN_ASSETS=str(assets), TITAN_DUMP_FOLDER=str(dump)),
        device="cpu",
    )
    step0 = dump / "checkpoint" / "step-0"
    if done.returncode != 0 or not step0.is_dir():
        pytest.fail(
            f"seed checkpoint: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return step0


def _train(assets: Path, seed: Path, name: str, device: str | None, **env: str):
    return _launch(
        2,
        [
            "--parallelism.data_parallel_shard_degree",
            "2",
            "--training.steps",
            str(STEPS),
            "--checkpoint.enable",
            "--checkpoint.load_only",
            "--checkpoint.initial_load_path",
            str(seed),
        ],
        _env(TITAN_ASSETS=str(assets), TITAN_DUMP_FOLDER=str(assets / name), **env),
        device=device,
    )


def test_fsdp_on_nkipy_follows_the_cpu_gloo_loss_curve(assets, seed_checkpoint, tmp_path):
    cpu_run, cpu_seconds = _train(assets, seed_checkpoint, "cpu", device="cpu")
    reference = _steps(cpu_run, "CPU/gloo")
    nkipy_run, nkipy_seconds = _train(
        assets,
        seed_checkpoint,
        "nkipy",
        device=None,
        NKIPY_RUNTIME="cpu",
        NKIPY_CACHE=str(tmp_path / "nkipy_cache"),
    )
    device = _steps(nkipy_run, "nkipy")
    print(f"\nCPU/gloo {cpu_seconds:.0f} s, nkipy {nkipy_seconds:.0f} s")
    for step in range(1, STEPS + 1):
        (loss, norm), (want_loss, want_norm) = device[step], reference[step]
        print(
            f"step {step}: loss {loss:.5f} (CPU {want_loss:.5f}), grad_norm {norm:.4f} (CPU {want_norm:.4f})"
        )
        assert abs(loss - want_loss) <= LOSS_ATOL, (step, loss, want_loss)
        assert abs(norm - want_norm) <= GRAD_NORM_RTOL * want_norm, (step, norm, want_norm)
    assert reference[STEPS][0] < reference[1][0] - 1.0, "the reference run did not train"
