"""Draw the benchmark scripts' JSON results as PNG charts for the docs.

The scripts append every table they print to the file ``NKIPY_BENCH_JSON`` names
(``benchmarks/_timing.py``). This draws one PNG per JSON file, one panel per table: a bar per
row, its length the row's time divided by a baseline row measured in the same run (``eager``
unless ``--baseline`` says otherwise), so runs on machines of different speed read the same and
the 1.0 line is "as fast as the baseline". The measured time is written at the end of each bar.

Run: NKIPY_BENCH_JSON=benchmarks/results/overhead.json python benchmarks/bench_overhead.py
     python benchmarks/plot.py benchmarks/results/*.json --out docs/img

Needs matplotlib (``pip install matplotlib``); nothing else in nkipy does.
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on a build machine

import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend

SCALE = {"s": 1.0, "ms/call": 1e3, "µs/call": 1e6}


def draw(tables: list[dict], title: str, baseline: str, out: Path) -> None:
    """One PNG of ``tables`` (as ``_timing.print_table`` records them) at ``out``."""
    columns = 2 if len(tables) > 1 else 1
    rows_of_panels = math.ceil(len(tables) / columns)
    heights = [max(len(t["rows"]), 2) * 0.38 + 1.3 for t in tables]
    figure, axes = plt.subplots(
        rows_of_panels,
        columns,
        figsize=(7 * columns, sum(heights[::columns]) + 0.6),
        squeeze=False,
    )
    for ax, table in zip(axes.flat, tables):
        _panel(ax, table, baseline)
    for ax in list(axes.flat)[len(tables) :]:
        ax.set_visible(False)
    figure.suptitle(title, fontsize=12)
    figure.text(0.01, 0.005, tables[0].get("machine", ""), fontsize=7, color="0.4")
    figure.tight_layout(rect=(0, 0.03, 1, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)


def _panel(ax, table: dict, baseline: str) -> None:
    rows = [r for r in table["rows"] if r["seconds"] is not None]
    reference = next((r["seconds"] for r in rows if r["name"] == baseline), None)
    names = [r["name"] for r in rows][::-1]
    if reference:
        values = [r["seconds"] / reference for r in rows][::-1]
        ax.axvline(1.0, color="0.3", linestyle="--", linewidth=1)
        ax.set_xlabel(f"time ÷ {baseline} (shorter is faster)")
    else:  # no baseline row in this table: plot the times themselves
        values = [r["seconds"] * SCALE[table["unit"]] for r in rows][::-1]
        ax.set_xlabel(table["unit"])
    colours = ["#d95f02" if n.startswith("nkipy") else "#7570b3" for n in names]
    bars = ax.barh(names, values, color=colours)
    scale = SCALE[table["unit"]]
    unit = table["unit"].split("/")[0]
    for bar, row in zip(bars, rows[::-1]):
        label = f" {row['seconds'] * scale:.3g} {unit}"
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, label, va="center", fontsize=8)
    ax.set_xlim(0, max(values) * 1.35)
    ax.set_title("\n".join(textwrap.wrap(table["title"], 70)), fontsize=9)
    ax.tick_params(axis="y", labelsize=8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "results", nargs="+", type=Path, help="JSON files written through NKIPY_BENCH_JSON"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("docs/img"),
        help="directory for the PNGs (default docs/img)",
    )
    parser.add_argument(
        "--baseline", default="eager", help="row the others are divided by (default eager)"
    )
    args = parser.parse_args()
    for path in args.results:
        tables = json.loads(path.read_text())
        if not tables:
            continue
        out = args.out / f"{path.stem}.png"
        draw(tables, path.stem.replace("_", " "), args.baseline, out)
        print(f"wrote {out} ({len(tables)} table(s))")


if __name__ == "__main__":
    main()
