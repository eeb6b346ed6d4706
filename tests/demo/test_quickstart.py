"""The README's demo must keep working: it runs the quick-start example as a user would."""

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "quickstart.py"


def test_quickstart_matches_eager_in_one_kernel(tmp_path):
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "matches eager: True" in result.stdout
    assert "kernels compiled: 1," in result.stdout
    assert "ops that fell back to CPU: 0" in result.stdout
    assert "FallbackWarning" not in result.stderr
    assert list((tmp_path / "nkipy_cache" / "kernels").glob("*/kernel.py"))
