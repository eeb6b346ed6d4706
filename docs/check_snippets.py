"""Run the Python snippets of the docs, so that they cannot rot.

For each Markdown file, its ```python blocks are joined into one script and run in a fresh
interpreter in a temporary directory (with ``examples/third_party_pack/src`` importable); then
every ``test_*`` function the script defined is called (``tmp_path`` is the only fixture
provided; tests that need others are reported as not called).

Run: python docs/check_snippets.py [docs/writing-a-pack.md docs/architecture.md ...]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

CALL_TESTS = """
import inspect as _inspect, pathlib as _pathlib, tempfile as _tempfile
for _name, _fn in list(globals().items()):
    if _name.startswith("test_") and callable(_fn):
        _params = list(_inspect.signature(_fn).parameters)
        if set(_params) <= {"tmp_path"}:
            _fn(*[_pathlib.Path(_tempfile.mkdtemp()) for _ in _params])
            print(f"called {_name}")
        else:
            print(f"not called {_name}{tuple(_params)}")
"""


def check(doc: Path) -> bool:
    blocks = BLOCK.findall(doc.read_text())
    if not blocks:
        print(f"{doc.relative_to(ROOT)}: no python snippets")
        return True
    script = "\n\n".join(blocks) + "\n" + CALL_TESTS
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "examples/third_party_pack/src"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snippets.py"
        path.write_text(script)
        proc = subprocess.run(
            [sys.executable, "-W", "ignore", str(path)],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
    status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
    print(f"{doc.relative_to(ROOT)}: {len(blocks)} python snippet(s) {status}")
    for line in proc.stdout.splitlines():
        print(f"    {line}")
    if proc.returncode:
        print(proc.stderr)
    return proc.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "docs", nargs="*", type=Path, help="Markdown files (default: every docs/*.md)"
    )
    args = parser.parse_args()
    docs = [d.resolve() for d in args.docs] or sorted((ROOT / "docs").glob("*.md"))
    results = [check(doc) for doc in docs]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
