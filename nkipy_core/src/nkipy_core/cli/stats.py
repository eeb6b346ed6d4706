"""``nkipy-ops stats DIR``: which kernels the last run spent its time in, and what eager fusion
did (flushes, ops per flush, why each flush happened, ops run one by one), from the counters a
program writes under its kernel cache at exit (``nkipy_core.observe.profiling``).
"""

from __future__ import annotations

import argparse
from typing import Any

from nkipy_core.cli.command import EXIT_OK, UsageError, cache_dir
from nkipy_core.cli.format import emit, table_section
from nkipy_core.observe import profiling

#: ``--sort`` choices: the key each sorts by, largest first (``name``: alphabetical)
STATS_SORTS = {
    "total": lambda k: -k["total_ns"],
    "mean": lambda k: -k["mean_us"],
    "calls": lambda k: -k["calls"],
    "bytes": lambda k: -(k["bytes_in"] + k["bytes_out"]),
    "name": lambda k: k["name"],
}


def kernel_rows(runs: list[dict[str, Any]], sort: str = "total") -> list[dict[str, Any]]:
    """One row per kernel key over the given runs' files (ranks summed), sorted by ``sort``."""
    rows: dict[str, dict[str, Any]] = {}
    for run in runs:
        for k in run["kernels"]:
            row = rows.setdefault(
                k["key"], {**k, "calls": 0, "total_ns": 0, "bytes_in": 0, "bytes_out": 0}
            )
            for field in ("calls", "total_ns", "bytes_in", "bytes_out"):
                row[field] += k[field]
    for row in rows.values():
        row["total_ms"] = row["total_ns"] / 1e6
        row["mean_us"] = row["total_ns"] / row["calls"] / 1e3 if row["calls"] else 0.0
    return sorted(rows.values(), key=lambda k: (STATS_SORTS[sort](k), k["key"]))


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def render_stats(report: dict[str, Any]) -> str:
    runs = ", ".join(
        f"rank {r['rank']} (pid {r['pid']}, finished {r['finished'][:19].replace('T', ' ')} UTC)"
        for r in report["runs"]
    )
    total = sum(k["total_ns"] for k in report["kernels"]) / 1e6
    lines = [
        f"Kernel statistics of the last run in {report['cache']}: {runs}; {total:.3f} ms in kernels"
    ]
    lines.append(
        table_section(
            "Kernels",
            "no kernel was called",
            ["key", "name", "calls", "total ms", "mean µs", "bytes in", "bytes out", "ops"],
            [
                (
                    k["key"][:12],
                    k["name"],
                    k["calls"],
                    f"{k['total_ms']:.3f}",
                    f"{k['mean_us']:.1f}",
                    _bytes(k["bytes_in"]),
                    _bytes(k["bytes_out"]),
                    k["ops"] or "-",
                )
                for k in report["kernels"]
            ],
        )
    )
    return "\n".join(lines) + "\n\n" + _eager_section(report["eager"])


def eager_totals(runs: list[dict[str, Any]]) -> dict[str, int]:
    """The eager fusion counters of the given runs' files, ranks summed (older files have none)."""
    totals: dict[str, int] = {}
    for run in runs:
        for name, value in run.get("eager", {}).items():
            totals[name] = totals.get(name, 0) + value
    return totals


def _eager_section(counters: dict[str, int]) -> str:
    """Eager fusion: flushes, ops per flush, why each flush happened, ops run one by one."""
    flushes, ops = counters.get("eager_flushes", 0), counters.get("eager_flushed_ops", 0)
    head = (
        f"Eager fusion: {flushes} flushes of {ops} queued ops"
        + (f" ({ops / flushes:.1f} per flush)" if flushes else "")
        + f", {counters.get('eager_fused_compiles', 0)} fused kernels compiled, "
        f"{counters.get('eager_fusion_storms', 0)} regions back to one kernel per op"
    )
    reasons = sorted(
        ((k.split(":", 1)[1], v) for k, v in counters.items() if k.startswith("eager_flush:")),
        key=lambda row: (-row[1], row[0]),
    )
    per_op = sorted(
        ((k.split(":", 1)[1], v) for k, v in counters.items() if k.startswith("eager_per_op:")),
        key=lambda row: (-row[1], row[0]),
    )
    return "\n\n".join(
        [
            head,
            table_section("Why the queue ran", "no flush", ["reason", "flushes"], reasons),
            table_section("Ops run one by one", "none", ["op", "calls"], per_op),
        ]
    )


def cmd_stats(args: argparse.Namespace) -> int:
    """The per-kernel counters the last program run with this cache wrote at exit: calls, time
    and bytes per kernel (every rank's, summed, or ``--rank``'s)."""
    cache = cache_dir(args.cache)
    runs = profiling.read_last_run(cache)
    if not runs:
        raise UsageError(
            f"no kernel statistics under {cache}: run a program with nkipy_cache={cache} first"
        )
    if args.rank is not None:
        ranks = [r["rank"] for r in runs]
        runs = [r for r in runs if r["rank"] == args.rank]
        if not runs:
            raise UsageError(f"the last run in {cache} has no rank {args.rank}; its ranks: {ranks}")
    report = {
        "cache": str(cache),
        "runs": [
            {k: r[k] for k in ("rank", "world_size", "pid", "finished", "file")} for r in runs
        ],
        "kernels": kernel_rows(runs, args.sort),
        "eager": eager_totals(runs),
    }
    emit(report, render_stats(report), args.format)
    return EXIT_OK
