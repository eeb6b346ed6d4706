"""``nkipy-ops explain [DIR]``: how many kernel graphs each compiled function needed, and why it
compiled again, from the lines every compile appends to ``DIR/stats/recompiles.jsonl``
(``nkipy_core.observe.recompiles``).

A storm of recompiles reads as one row: ``L_input_ids_ dim 1  19  37 vs 32, 64 vs 37, ...``
says that a prompt length compiled 19 times, and suggests padding it (``nkipy_core.buckets``)
or marking it dynamic.
"""

from __future__ import annotations

import argparse
import collections
from typing import Any

from nkipy_core.cli.command import EXIT_OK, UsageError, cache_dir
from nkipy_core.cli.format import emit, table_section
from nkipy_core.observe import recompiles

#: distinct values a reason row shows before it says how many more there are
SHOWN_VALUES = 5
#: the row of a function's first compile, which has no reason
FIRST = "first compile"


def last_run(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the last run: for each rank, those of the last process that recorded."""
    newest: dict[int, int] = {}
    for r in records:
        newest[r["rank"]] = r["pid"]  # records are in the order they were appended
    return [r for r in records if newest[r["rank"]] == r["pid"]]


def summarise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per function, most kernel graphs first: how many, of which kinds, and the reasons grouped
    by what differed (a compile with two differences counts in both rows)."""
    functions: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records:
        functions[r["function"]].append(r)
    summary = []
    for function, compiles in functions.items():
        kinds = collections.Counter(r["kind"] for r in compiles)
        reasons: dict[str, list[str]] = collections.defaultdict(list)
        for r in compiles:
            for reason in r["reasons"] or [{"what": FIRST}]:
                value = f"{reason['new']} vs {reason['old']}" if "new" in reason else ""
                reasons[reason["what"]].append(value)
        rows: list[dict[str, Any]] = [
            {
                "what": what,
                "compiles": len(values),
                "values": list(dict.fromkeys(v for v in values if v)),
            }
            for what, values in reasons.items()
        ]
        rows.sort(key=lambda row: (row["what"] != FIRST, -row["compiles"], row["what"]))
        summary.append(
            {
                "function": function,
                "kernel_graphs": len(compiles),
                "kinds": dict(sorted(kinds.items())),
                "reasons": rows,
            }
        )
    return sorted(summary, key=lambda f: (-f["kernel_graphs"], f["function"]))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _values(values: list[str]) -> str:
    shown = ", ".join(values[:SHOWN_VALUES])
    more = len(values) - SHOWN_VALUES
    return (f"{shown}, +{more} more" if more > 0 else shown) or "-"


def render_explain(report: dict[str, Any]) -> str:
    runs = ", ".join(f"rank {r['rank']} (pid {r['pid']})" for r in report["runs"])
    total = sum(f["kernel_graphs"] for f in report["functions"])
    lines = [
        f"Compiles recorded in {report['cache']} ({report['scope']}: {runs}): {total} kernel "
        f"graphs of {_count(len(report['functions']), 'function')}"
    ]
    for f in report["functions"]:
        kinds = ", ".join(_count(n, kind) for kind, n in f["kinds"].items())
        lines.append("")
        lines.append(
            table_section(
                f"{f['function']}: {f['kernel_graphs']} kernel graphs ({kinds}); reasons",
                "none",
                ["what differed", "compiles", "new vs nearest compiled"],
                [(r["what"], r["compiles"], _values(r["values"])) for r in f["reasons"]],
            )
        )
    return "\n".join(lines)


def cmd_explain(args: argparse.Namespace) -> int:
    """Per compiled function of the last run (every recorded run with ``--all``): its kernel
    graphs and why each one after the first was compiled."""
    cache = cache_dir(args.cache)
    records = recompiles.read(cache)
    if not records:
        raise UsageError(
            f"no compiles recorded under {cache}: run a program with nkipy_cache={cache} first"
        )
    if not args.all:
        records = last_run(records)
    runs = sorted({(r["rank"], r["pid"]) for r in records})
    report = {
        "cache": str(cache),
        "scope": "every recorded run" if args.all else "last run",
        "runs": [{"rank": rank, "pid": pid} for rank, pid in runs],
        "functions": summarise(records),
    }
    emit(report, render_explain(report), args.format)
    return EXIT_OK
