"""The NKI guide's code runs as written."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_python_snippets_of_the_nki_guide_run():
    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "check_snippets.py"), str(ROOT / "docs" / "nki.md")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "docs/nki.md: 2 python snippet(s) ok" in result.stdout
