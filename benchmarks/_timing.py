"""Timing helpers shared by the benchmark scripts: warm up, time repeated runs, print ratios.

Import this module before torch: it makes every backend single-threaded unless the caller set
``OMP_NUM_THREADS`` (torch's intra-op pool, inductor's generated OpenMP code and NumPy's OpenBLAS
all read it). On a small shared machine, multi-threaded OpenMP/BLAS pools that spin while other
processes hold the cores make timings erratic (tens of times slower at random), so one thread
each is the reproducible default; ``OMP_NUM_THREADS=2 python benchmarks/...`` measures with two.
XLA's CPU client ignores ``OMP_NUM_THREADS`` and sizes its pool by the CPUs the process may run
on, so the process is also pinned to that many CPUs: every backend then gets the same cores.

With ``NKIPY_BENCH_JSON=PATH`` set, every table a script prints is also appended to the JSON file
at ``PATH`` (a list of tables: title, unit, rows in seconds, machine line), which
``benchmarks/plot.py`` draws into the docs' charts.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

os.environ.setdefault("OMP_NUM_THREADS", "1")
THREADS = int(os.environ["OMP_NUM_THREADS"])
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:THREADS])


def median_time(
    fn: Callable[[], object], *, warmup: int = 5, repeat: int = 7, number: int | None = None
) -> float:
    """Median over ``repeat`` runs of the time of one call of ``fn``, in seconds.

    Each run times ``number`` back-to-back calls and divides, so very short calls are not
    dominated by the clock; ``number=None`` picks it so that one run takes about 50 ms.
    ``warmup`` calls beforehand are not timed.
    """
    return median_times({"": fn}, warmup=warmup, repeat=repeat, number=number)[""]


def median_times(
    fns: dict[str, Callable[[], object]],
    *,
    warmup: int = 5,
    repeat: int = 7,
    number: int | None = None,
) -> dict[str, float]:
    """``median_time`` of each of ``fns``, by name, measured in rounds: each round makes one run
    of every function in turn.

    This machine's speed drifts (the same loop runs up to 1.7x slower for a minute at a time),
    so functions timed one after the other can be compared only across that drift; in rounds,
    every function sees the same drift and their ratios hold.
    """
    numbers = {}
    for name, fn in fns.items():
        start = time.perf_counter()
        for _ in range(warmup):
            fn()
        per_call = (time.perf_counter() - start) / max(warmup, 1)
        numbers[name] = number or max(1, int(0.05 / max(per_call, 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            count = numbers[name]
            start = time.perf_counter()
            for _ in range(count):
                fn()
            samples[name].append((time.perf_counter() - start) / count)
    return {name: statistics.median(times) for name, times in samples.items()}


def machine() -> str:
    """One line describing where the numbers were measured."""
    import torch

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{platform.machine()} {os.cpu_count()} CPU(s), Python {platform.python_version()}, "
        f"torch {torch.__version__}, {THREADS} thread(s) per backend; load average {load}"
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
    _record(title, rows, unit, baselines)
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


def _record(
    title: str, rows: Sequence[tuple[str, float | None]], unit: str, baselines: Sequence[str]
) -> None:
    """Append the table to the JSON file ``NKIPY_BENCH_JSON`` names, if it names one."""
    path = os.environ.get("NKIPY_BENCH_JSON")
    if not path:
        return
    tables = json.loads(open(path).read()) if os.path.exists(path) else []
    tables.append(
        {
            "title": title,
            "unit": unit,
            "baselines": list(baselines),
            "machine": machine(),
            "rows": [{"name": name, "seconds": seconds} for name, seconds in rows],
        }
    )
    with open(path, "w") as f:
        json.dump(tables, f, indent=1)


def run_ranks(script: str, worker: Callable[[], None], *, timeout: float = 1800) -> None:
    """Run ``worker`` as each of 2 ranks: under torchrun, ``script`` is a rank and calls it;
    started by hand, it starts itself under torchrun and exits with torchrun's status."""
    if "RANK" in os.environ:
        worker()
        return
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        script,
    ]
    sys.exit(subprocess.run(command, timeout=timeout).returncode)


#: calls before an ``auto`` row is timed: with ``NKIPY_AUTO_PAYBACK=0`` (``backends``) every
#: kernel is compiled for XLA at its first call, then tried on both runtimes (3 calls each and
#: one untimed XLA call) before it settles where it runs
AUTO_SETTLE = 9


def warmup_of(row: str, warmup: int) -> int:
    """The untimed runs of ``row``: ``warmup``, and for the ``auto`` row enough to settle."""
    return max(warmup, AUTO_SETTLE) if row.endswith("(auto)") else warmup


#: the host runtimes a benchmark row runs nkipy on, where available
HOST_RUNTIMES = ("cpu", "xla", "auto", "inductor")


def host_runtimes() -> list[str]:
    """The host runtimes available here. ``auto`` tries every kernel on ``cpu`` and ``xla`` at
    once (``NKIPY_AUTO_PAYBACK=0`` unless set), so that its timed runs measure where its
    kernels settled."""
    from nkipy_core.plugin import manager as plugins

    os.environ.setdefault("NKIPY_AUTO_PAYBACK", "0")
    registry = plugins.get().runtimes
    return [
        name
        for name in HOST_RUNTIMES
        if registry.get(name) is not None and registry.get(name).available()[0]
    ]


def backends() -> dict[str, Callable[[Callable], Callable]]:
    """Row name -> how that row compiles a function (eager: not at all): eager, inductor and
    nkipy on each available host runtime (``host_runtimes``), each with a fresh kernel cache."""
    import tempfile

    import torch

    rows = {
        "eager": lambda fn: fn,
        "inductor": lambda fn: torch.compile(fn, backend="inductor", dynamic=False),
    }
    for name in host_runtimes():
        options = {"runtime": name, "nkipy_cache": tempfile.mkdtemp(prefix=f"nkipy-bench-{name}-")}
        rows[f"nkipy ({name})"] = lambda fn, options=options: torch.compile(
            fn, backend="nkipy", dynamic=False, options=options
        )
    return rows


def rows_compiled_alike(compilers: int):
    """A context in which ``compilers`` rows may each compile the same functions: dynamo counts
    every backend's graphs of a code object against one recompile limit (8), past which it runs
    the code eagerly, so rows kept alive side by side (timed in rounds) would find the later
    ones silently running eager code. The limit is raised to 8 per row."""
    import torch

    return torch._dynamo.config.patch(recompile_limit=8 * max(compilers, 1))


def measure(
    title: str,
    unit: str,
    compilers: dict[str, Callable[[Callable], Callable]],
    make: Callable[[Callable[[Callable], Callable]], tuple[Callable, Callable]],
    check: Callable[[object, object], None],
    repeat: int,
    per: int = 1,
    note: Callable[[float], str] | None = None,
    warmup: int = 1,
) -> None:
    """A row per compiler (``backends()``), each timing its ``run`` after checking its first
    result against eager's with ``check``. ``make(compile_fn) -> (run, result)``: ``result()``
    runs once (compiling) and returns what ``check`` compares; the figure printed is the median
    time of ``run`` divided by ``per``, after ``warmup`` untimed runs (a compiled optimizer
    step compiles again on its second call, once its state exists). Every row is compiled and
    checked first, then all are timed in rounds (``median_times``), so that each sees the same
    drift of the machine's speed."""
    import traceback

    import torch

    runs, notes, expected = {}, {}, None
    with rows_compiled_alike(len(compilers)):
        for name, compile_fn in compilers.items():
            try:
                run, result = make(compile_fn)
                got = result()
                if expected is None:
                    expected = got
                else:
                    check(got, expected)
                for _ in range(warmup_of(name, warmup)):
                    run()
                runs[name] = run
            except Exception as exc:  # noqa: BLE001 - report and go on with the other rows
                traceback.print_exc()
                notes[name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        times = median_times(runs, warmup=1, repeat=repeat)
    torch._dynamo.reset()
    rows = [(name, times[name] / per if name in times else None) for name in compilers]
    if note:
        notes.update({name: note(seconds) for name, seconds in rows if seconds is not None})
    print_table(title, rows, unit=unit, note=notes)
