"""Rendering shared by the ``nkipy-ops`` commands: text tables, and ``--format``'s choice between
them and JSON.

A command gathers its data as plain JSON-ready dicts first and renders them second, so
``--format json`` and the text tables can never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces; the last column is never padded."""
    cells = [[str(c) for c in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    rule = ["-" * w for w in widths]
    lines = []
    for row in [cells[0], rule, *cells[1:]]:
        padded = [c.ljust(w) for c, w in zip(row[:-1], widths[:-1])] + [row[-1]]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def table_section(title: str, empty: str, headers: list[str], cells: list[tuple]) -> str:
    """``Title (n)`` over a table of ``cells``, or over the ``empty`` line when there are none."""
    body = format_table(headers, cells) if cells else f"  {empty}"
    return f"{title} ({len(cells)})\n{body}"


def emit(data: Any, text: str, fmt: str) -> None:
    """Print ``data`` as JSON or its rendering ``text``, as ``--format`` asks."""
    print(json.dumps(data, indent=2) if fmt == "json" else text)
