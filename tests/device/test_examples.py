"""The examples under examples/basics run as a user would run them, and say they match CPU."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BASICS = Path(__file__).parents[2] / "examples" / "basics"

EXPECTED = {
    "device_basics.py": [
        "device: nkipy:0 | torch.accelerator picks it: True",
        "eager ops match CPU: True",
        "parameters on: {'nkipy'} | buffers on: {'nkipy'}",
        "loaded state dict on: {'nkipy'}",
    ],
    "hybrid.py": ["output device: nkipy:0", "matches CPU: True"],
    "training.py": ["SGD: losses", "AdamW: losses", "losses and parameters match CPU: True"],
    "cpu_regions.py": [
        "output device: nkipy:0",
        "matches CPU: True",
        "kernels compiled (graphs and eager ops): ",
    ],
}


def test_every_example_is_covered():
    assert sorted(p.name for p in BASICS.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_and_matches_cpu(name, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NKIPY_RUNTIME"}  # a user's default setup
    result = subprocess.run(
        [sys.executable, str(BASICS / name)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in EXPECTED[name]:
        assert line in result.stdout, (line, result.stdout)
    assert "match CPU: False" not in result.stdout
    assert "FallbackWarning" not in result.stderr
