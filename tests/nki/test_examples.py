"""The examples under examples/nki run as a user would run them, and say they match torch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

NKI = Path(__file__).parents[2] / "examples" / "nki"

EXPECTED = {
    "custom_op.py": [
        "eager op matches torch: True",
        "compiled matches torch: True",
        "kernels 1; ops on CPU 0",
        "autograd through nki_op: True",
    ],
    "spmd_grid.py": [
        "mylib::tiled_add: grid matches torch: True",
        "mylib::tiled_add_nc2: grid matches torch: True",
        "kernels 2",
    ],
    "override.py": [
        "matches eager: True",
        "NKI kernels in the compiled code: ['rmsnorm_kernel', 'softmax_kernel']",
        "kernels 1",
    ],
}


def test_every_example_is_covered():
    assert sorted(p.name for p in NKI.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_and_matches_torch(name, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NKIPY_RUNTIME"}
    result = subprocess.run(
        [sys.executable, str(NKI / name)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in EXPECTED[name]:
        assert line in result.stdout, (line, result.stdout)
    assert "FallbackWarning" not in result.stderr
