"""The repository's ruff configuration is the one in force, and it lints.

CI runs ``ruff check .`` from the root; a configuration ruff did not find, or one that selects
nothing, would pass every file. Code is fed on stdin under a path in the tree, so ruff resolves
the configuration (and its per-file ignores) as it does for the real file there.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

UNUSED_IMPORT = "import os\n"


def _ruff_codes(source: str, path: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format=json"]
        + [f"--stdin-filename={path}", "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: findings; anything else: ruff failed
    return [finding["code"] for finding in json.loads(done.stdout)]


def test_ruff_reports_an_unused_import():
    assert _ruff_codes(UNUSED_IMPORT, "nkipy_core/src/nkipy_core/lint_probe.py") == ["F401"]


def test_ruff_reads_the_repository_configuration():
    # ruff.toml exempts this module from F401: it re-exports the interpreter's names
    assert _ruff_codes(UNUSED_IMPORT, "nkipy_ops_nki/src/nkipy_ops_nki/nki/language.py") == []
