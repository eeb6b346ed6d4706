"""Running ``nkipy-ops`` in-process and reading its tables, for the CLI suites of every env."""

import json
import re

from nkipy_core.cli.main import main


def run(capsys, *argv):
    """``nkipy-ops *argv`` in-process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def line_of(text, start):
    """The table row that starts with ``start`` (a row, not a substring anywhere)."""
    rows = [line for line in text.splitlines() if line.startswith(start)]
    assert len(rows) == 1, f"expected one row starting with {start!r} in:\n{text}"
    return rows[0].split()


def section(text, title):
    """The block of output under a ``Title (n)`` heading, up to the next blank line."""
    match = re.search(rf"^{title} \(\d+\)\n(.*?)(?:\n\n|\Z)", text, re.M | re.S)
    assert match, f"no {title!r} section in:\n{text}"
    return match.group(1)


def by(rows, key, value):
    (row,) = [r for r in rows if r[key] == value]
    return row
