"""Timing helpers shared by the benchmark scripts: warm up, time repeated runs, print ratios."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence


def median_time(fn: Callable[[], object], *, warmup: int = 5, repeat: int = 7, number: int = 1) -> float:
    """Median over ``repeat`` runs of the time of one call of ``fn``, in seconds.

    Each run times ``number`` back-to-back calls and divides, so very short calls are not
    dominated by the clock; ``warmup`` calls beforehand are not timed.
    """
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def machine() -> str:
    """One line describing where the numbers were measured."""
    import torch

    return (
        f"{platform.machine()} {os.cpu_count()} CPU(s), Python {platform.python_version()}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} intra-op threads)"
    )


def print_table(
    title: str,
    rows: Sequence[tuple[str, float | None]],
    *,
    unit: str = "ms/call",
    baselines: Sequence[str] = ("eager", "inductor"),
    note: dict[str, str] | None = None,
) -> None:
    """Print ``(name, seconds)`` rows in ``unit`` (``s``, ``ms/call`` or ``µs/call``) with a
    ``time / baseline`` ratio column per baseline.

    ``None`` is a measurement that could not be made (the row says why in ``note``); a baseline
    that is missing or ``None`` gets a ``-`` in its column.
    """
    scale = {"s": 1.0, "ms/call": 1e3, "µs/call": 1e6}[unit]
    values = dict(rows)
    note = note or {}
    header = f"{'':<28} {unit:>12}" + "".join(f" {'÷ ' + b:>12}" for b in baselines)
    print(f"\n{title}\n{header}\n{'-' * len(header)}")
    for name, seconds in rows:
        if seconds is None:
            print(f"{name:<28} {'n/a':>12}  {note.get(name, '')}")
            continue
        line = f"{name:<28} {seconds * scale:>12.3f}"
        for base in baselines:
            ref = values.get(base)
            line += f" {seconds / ref:>11.2f}x" if ref else f" {'-':>12}"
        print(line + (f"  {note[name]}" if name in note else ""))
