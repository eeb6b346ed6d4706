"""``nkipy-ops``: what the installed nkipy plugins provide, and whether this machine can run them.

``nkipy-ops list`` answers "who lowers this op, and who did it override?" (and, with
``--coverage core-aten``, "what is still missing?"); ``nkipy-ops doctor`` answers "why does my
compile fall back or fail here?"; ``nkipy-ops precompile -- CMD`` fills the kernel cache for a
device this machine lacks while CMD runs on the ``cpu`` runtime. Both read the same plugin state the backend uses
(``nkipy_core.plugin.manager.get()``), so what they show is what ``torch.compile`` will do.
``nkipy-ops stats DIR`` answers "which kernels did my last run spend its time in?" from the
counters a program writes under its kernel cache at exit (``nkipy_core.observe.profiling``).

The data is gathered as plain JSON-ready dicts first and rendered second, so ``--format json``
and the text tables can never disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy
import torch

from nkipy_core.cli import new_pack
from nkipy_core.cli.coverage_exclusions import EXCLUSIONS
from nkipy_core.compiler import precompile
from nkipy_core.errors import NkipyError
from nkipy_core.observe import profiling
from nkipy_core.plugin import manager as plugins
from nkipy_core.plugin.registry import LoweringRule, op_name

CORE_DISTRIBUTION = "nkipy-core"
OPSETS = ("core-aten",)

# Exit codes: 0 fine; 1 doctor found no usable runtime; 2 usage or plugin error (argparse's too).
EXIT_OK, EXIT_NO_RUNTIME, EXIT_ERROR = 0, 1, 2


# --------------------------------------------------------------------------- data gathering


def normalize_distribution(name: str) -> str:
    """PEP 503 form, so ``nkipy_ops_base``, ``nkipy-ops-base`` and ``NKIPy.Ops.Base`` all match."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _short_location(location: str, qualname: str) -> str:
    """``pkg/module.py:12`` instead of a long site-packages path, for the text table only."""
    path, sep, line = location.rpartition(":")
    if not sep or not os.path.isabs(path):
        return location
    top = sys.modules.get(qualname.split(".")[0])
    roots = list(getattr(top, "__path__", ())) or [getattr(top, "__file__", None) or path]
    rel = os.path.relpath(path, os.path.dirname(roots[0]))
    return location if rel.startswith("..") else f"{rel}:{line}"


def _rule_dict(rule: LoweringRule) -> dict[str, Any]:
    return {
        "provider": rule.provenance.distribution,
        "version": rule.provenance.version,
        "plugin": rule.provenance.plugin,
        "priority": rule.priority,
        "qualname": rule.qualname,
        "location": rule.location,
    }


def lowering_rows(loaded: plugins.Plugins, pack: str | None = None) -> list[dict[str, Any]]:
    """One row per op: the winning rule plus the lower-priority rules it overrides.

    With ``pack``, keep the ops that distribution gives a rule for, whether its rule wins or is
    overridden, so a pack author also sees where someone else outranks them.
    """
    rows = []
    for op in loaded.lowerings.ops():
        rules = loaded.lowerings.rules_for(op)
        if pack is not None and not any(
            normalize_distribution(r.provenance.distribution) == pack for r in rules
        ):
            continue
        winner, *others = rules
        rows.append({"op": op, **_rule_dict(winner), "overridden": [_rule_dict(r) for r in others]})
    return rows


def plugin_rows(loaded: plugins.Plugins) -> list[dict[str, Any]]:
    """Every discovered plugin, loaded or not, with the loader's error text when it failed (or
    why its hook API range excludes this core's)."""
    return [
        {
            "name": s.name,
            "distribution": s.provenance.distribution,
            "version": s.provenance.version,
            "module": s.module,
            "status": "ok" if s.ok else "incompatible" if s.incompatible else "failed",
            "hook_api": s.hook_api,
            "error": s.error,
        }
        for s in loaded.statuses
    ]


def _availability(runtime: Any) -> tuple[bool, str]:
    """``runtime.available()``, but a runtime whose probe itself crashes is just unavailable."""
    try:
        ok, reason = runtime.available()
    except Exception as exc:  # noqa: BLE001 - a third-party probe must not break the listing
        return False, f"available() raised {type(exc).__name__}: {exc}"
    return bool(ok), "" if ok else str(reason)


def runtime_rows(loaded: plugins.Plugins) -> list[dict[str, Any]]:
    """Registered runtimes in the order the default selection tries them (priority first)."""
    rows = []
    for name in loaded.runtimes.names():
        runtime = loaded.runtimes.get(name)
        provenance = loaded.runtimes.provenance(name)
        ok, reason = _availability(runtime)
        rows.append(
            {
                "name": name,
                "priority": getattr(runtime, "priority", 0),
                "provider": provenance.distribution if provenance else "<unknown>",
                "version": provenance.version if provenance else "?",
                "hardware": bool(getattr(runtime, "hardware", False)),
                "available": ok,
                "reason": reason,
                "details": _details(runtime) if ok else "",
            }
        )
    return rows


def _details(runtime: Any) -> str:
    """What an available runtime runs on, if it says (the optional ``Runtime.describe``)."""
    describe = getattr(runtime, "describe", None)
    if describe is None:
        return ""
    try:
        return describe()
    except Exception as exc:  # noqa: BLE001 - the doctor reports, it does not crash
        return f"describe() raised {type(exc).__name__}: {exc}"


def core_aten_ops() -> list[str]:
    """Every ATen overload tagged ``torch.Tag.core`` in the installed torch (its core opset).

    The dispatcher is asked for every registered op name, because ``dir(torch.ops.aten)``
    only lists packets that were already touched in this process.
    """
    found = set()
    for name in torch._C._dispatch_get_all_op_names():
        namespace, _, qualified = name.partition("::")
        if namespace != "aten":
            continue
        packet_name, _, overload = qualified.partition(".")
        try:
            overload_op = getattr(getattr(torch.ops.aten, packet_name), overload or "default")
        except (AttributeError, RuntimeError):
            continue
        if torch.Tag.core in overload_op.tags:
            found.add(op_name(overload_op))
    return sorted(found)


def coverage(lowered: Iterable[str], opset: str = "core-aten") -> dict[str, Any]:
    """How much of ``opset`` the given lowered ops cover; what is excluded by design, with the
    reason (``coverage_exclusions``); and the exact list that is still missing."""
    if opset not in OPSETS:
        raise ValueError(f"unknown opset {opset!r}; known: {', '.join(OPSETS)}")
    wanted = core_aten_ops()
    have = set(lowered)
    covered = [op for op in wanted if op in have]
    reasons = {e.op: e.reason for e in EXCLUSIONS[opset]}
    excluded = [
        {"op": op, "reason": reasons[op]} for op in wanted if op not in have and op in reasons
    ]
    return {
        "opset": opset,
        "torch": torch.__version__,
        "total": len(wanted),
        "covered": len(covered),
        "percent": round(100.0 * len(covered) / len(wanted), 1) if wanted else 0.0,
        "covered_ops": covered,
        "excluded": excluded,
        "missing": [op for op in wanted if op not in have and op not in reasons],
    }


def _distribution_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed (imported from a source tree)"


def versions(loaded: plugins.Plugins) -> dict[str, str]:
    """The versions a bug report needs: interpreter, torch, numpy, the core and every pack."""
    found = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        CORE_DISTRIBUTION: _distribution_version(CORE_DISTRIBUTION),
    }
    for status in loaded.statuses:
        found.setdefault(status.provenance.distribution, status.provenance.version)
    return found


def _selected_runtime(runtimes: list[dict[str, Any]]) -> dict[str, Any]:
    """What the backend would pick: ``NKIPY_RUNTIME`` if set, else the first available one."""
    requested = os.environ.get("NKIPY_RUNTIME") or None
    by_name = {r["name"]: r for r in runtimes}
    if requested is not None:
        row = by_name.get(requested)
        if row is None:
            problem = f"NKIPY_RUNTIME={requested!r} is not installed; installed: {sorted(by_name)}"
        elif not row["available"]:
            problem = f"NKIPY_RUNTIME={requested!r} is not available: {row['reason']}"
        else:
            problem = ""
        return {
            "requested": requested,
            "selected": requested if not problem else None,
            "problem": problem,
        }
    first = next((r["name"] for r in runtimes if r["available"]), None)
    return {
        "requested": None,
        "selected": first,
        "problem": "" if first else "no runtime is available",
    }


def _resolve_pack(loaded: plugins.Plugins, pack: str | None) -> str | None:
    """The normalized ``--pack`` name; an unknown one is a usage error, not an empty table."""
    if pack is None:
        return None
    wanted = normalize_distribution(pack)
    known = {normalize_distribution(s.provenance.distribution) for s in loaded.statuses}
    if wanted not in known:
        raise _UsageError(
            f"no installed distribution named {pack!r} provides nkipy plugins; "
            f"installed: {', '.join(sorted(known)) or 'none'}"
        )
    return wanted


class _UsageError(Exception):
    """A bad argument detected after parsing; reported like argparse's errors (exit 2)."""


# --------------------------------------------------------------------------- rendering


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


def _table_section(title: str, empty: str, headers: list[str], cells: list[tuple]) -> str:
    """``Title (n)`` over a table of ``cells``, or over the ``empty`` line when there are none."""
    body = format_table(headers, cells) if cells else f"  {empty}"
    return f"{title} ({len(cells)})\n{body}"


def render_lowerings(rows: list[dict[str, Any]], pack: str | None) -> str:
    hint = f"from {pack}" if pack else "installed (install nkipy-ops-base for the core ATen opset)"
    return _table_section(
        "Lowerings",
        f"no lowerings {hint}",
        ["op", "provider", "version", "priority", "overrides", "rule"],
        [
            (
                r["op"],
                r["provider"],
                r["version"],
                r["priority"],
                ", ".join(o["provider"] for o in r["overridden"]) or "-",
                _short_location(r["location"], r["qualname"]),
            )
            for r in rows
        ],
    )


def render_plugins(rows: list[dict[str, Any]]) -> str:
    return _table_section(
        "Plugins",
        "no nkipy plugins found (is nkipy-core installed?)",
        ["plugin", "distribution", "version", "hook API", "status", "module / error"],
        [
            (
                r["name"],
                r["distribution"],
                r["version"],
                r["hook_api"] or "-",
                r["status"],
                r["module"] or r["error"],
            )
            for r in rows
        ],
    )


def render_runtimes(rows: list[dict[str, Any]]) -> str:
    return _table_section(
        "Runtimes",
        "no runtimes registered",
        ["runtime", "priority", "provider", "hardware", "available", "reason"],
        [
            (
                r["name"],
                r["priority"],
                f"{r['provider']} {r['version']}",
                "yes" if r["hardware"] else "no",
                "yes" if r["available"] else "no",
                r["reason"] or "-",
            )
            for r in rows
        ],
    )


def render_coverage(report: dict[str, Any], pack: str | None) -> str:
    by = f" by {pack}" if pack else ""
    lines = [
        f"{report['opset']} (torch {report['torch']}): {report['covered']}/{report['total']} "
        f"overloads lowered{by} ({report['percent']}%)",
    ]
    if report["excluded"]:
        lines.append(f"excluded ({len(report['excluded'])}), not lowerable by design:")
        width = max(len(e["op"]) for e in report["excluded"])
        lines.extend(f"  {e['op'].ljust(width)}  {e['reason']}" for e in report["excluded"])
    if report["missing"]:
        lines.append(f"missing ({len(report['missing'])}):")
        lines.extend(f"  {op}" for op in report["missing"])
    return "\n".join(lines)


def device_status() -> dict[str, Any]:
    """Whether torch knows the ``nkipy`` device, how it was registered, and whether torch may
    pick it as the machine's accelerator (``torch.nkipy.is_available()``)."""
    from nkipy_core.buffers.device_contract import NAME
    from nkipy_core.device import module

    taken = torch._C._get_privateuse1_backend_name()
    return {
        "name": NAME,
        "registered": taken == NAME,
        "autoload": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") == "1",
        "privateuse1": taken,
        "accelerator": taken == NAME and module.is_available(),
    }


def render_device(device: dict[str, Any]) -> str:
    if not device["registered"]:
        return (
            f"Problem: torch device {device['name']!r} is not registered: PrivateUse1 is "
            f"{device['privateuse1']!r} (another package took it)"
        )
    how = (
        "torch autoload"
        if device["autoload"]
        else "import nkipy_core (TORCH_DEVICE_BACKEND_AUTOLOAD=0)"
    )
    if device["accelerator"]:
        accelerator = "torch.accelerator picks it"
    else:
        accelerator = (
            "torch.accelerator does not pick it: no hardware runtime is available; name a runtime to "
            "opt in (NKIPY_RUNTIME=cpu or init_nkipy_backend(runtime='cpu')), or use .to('nkipy')"
        )
    return f"Torch device: {device['name']} (registered by {how}); {accelerator}"


def render_doctor(report: dict[str, Any]) -> str:
    lines = ["Versions"]
    width = max(map(len, report["versions"]))
    lines += [f"  {k.ljust(width)}  {v}" for k, v in report["versions"].items()]
    lines += ["", render_plugins(report["plugins"]), "", render_runtimes(report["runtimes"]), ""]
    selection = report["selection"]
    if selection["problem"]:
        lines.append(f"Problem: {selection['problem']}")
    else:
        how = "NKIPY_RUNTIME" if selection["requested"] else "highest-priority available"
        lines.append(f"Runtime torch.compile will use: {selection['selected']} ({how})")
    lines.append(render_device(report["device"]))
    for row in report["plugins"]:
        if row["status"] != "ok":
            lines.append(
                f"Problem: plugin {row['name']!r} ({row['distribution']}) was skipped: {row['error']}"
            )
    for row in report["runtimes"]:
        if not row["available"]:
            lines.append(f"Note: runtime {row['name']!r} is unavailable: {row['reason']}")
        elif row["details"]:
            lines.append(f"Runtime {row['name']!r}: {row['details']}")
    return "\n".join(lines)


def render_precompile(report: dict[str, Any]) -> str:
    headers = ["kernels", "compiled", "cached", "failed", "compiler seconds"]
    row = [
        report["kernels"],
        report["compiled"],
        report["cached"],
        report["failed"],
        f"{report['compiler_seconds']:.1f}",
    ]
    lines = [
        f"Precompile for {report['runtime']} into {report['cache']}",
        format_table(headers, [row]),
    ]
    lines += [f"  failed: {f['kernel']}: {f['error']}" for f in report["failures"]]
    lines.append(f"command exited with code {report['exit_code']}")
    return "\n".join(lines)


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
        _table_section(
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
    return "\n".join(lines)


def _emit(data: Any, text: str, fmt: str) -> None:
    print(json.dumps(data, indent=2) if fmt == "json" else text)


# --------------------------------------------------------------------------- commands


def _load(args: argparse.Namespace) -> plugins.Plugins:
    """The backend's own plugin state; ``--strict`` makes a skipped plugin an error."""
    return plugins.get(strict=args.strict)


def cmd_list(args: argparse.Namespace) -> int:
    """Lowerings, plugins and runtimes; or, with ``--coverage``, the opset coverage report."""
    loaded = _load(args)
    pack = _resolve_pack(loaded, args.pack)
    rows = lowering_rows(loaded, pack)
    if args.coverage:
        report = coverage((r["op"] for r in rows), args.coverage)
        _emit({"pack": pack, **report}, render_coverage(report, pack), args.format)
        return EXIT_OK
    plugin_data, runtime_data = plugin_rows(loaded), runtime_rows(loaded)
    data = {"pack": pack, "lowerings": rows, "plugins": plugin_data, "runtimes": runtime_data}
    text = "\n\n".join(
        [render_lowerings(rows, pack), render_plugins(plugin_data), render_runtimes(runtime_data)]
    )
    failed = sum(p["status"] != "ok" for p in plugin_data)
    if failed:
        text += f"\n\n{failed} plugin(s) were skipped (failed or incompatible); --strict makes this an error."
    _emit(data, text, args.format)
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    """Versions, plugins, runtimes and what each unavailable runtime needs.

    Exit code 1 when ``torch.compile(backend="nkipy")`` could not run here: no runtime is
    available, or ``NKIPY_RUNTIME`` names one that is missing or unavailable.
    """
    loaded = _load(args)
    runtime_data = runtime_rows(loaded)
    report: dict[str, Any] = {
        "versions": versions(loaded),
        "plugins": plugin_rows(loaded),
        "runtimes": runtime_data,
        "selection": _selected_runtime(runtime_data),
        "device": device_status(),
    }
    # Without NKIPY_RUNTIME this is "at least one runtime is available"; with it, that runtime.
    report["ok"] = not report["selection"]["problem"]
    _emit(report, render_doctor(report), args.format)
    return EXIT_OK if report["ok"] else EXIT_NO_RUNTIME


def cmd_precompile(args: argparse.Namespace) -> int:
    """Run the command on the ``cpu`` runtime with every kernel also compiled for ``--runtime``
    into the cache; print what was compiled. Exit code: the command's, else 1 if a kernel failed.

    The command runs in a child process, configured by environment variables only, so that any
    program (``python train.py``, ``torchrun ...``) works unchanged; it writes its counts to a
    file at exit (``nkipy_core.compiler.precompile``), which is read back here.
    """
    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    if not command:
        raise _UsageError(
            "give the command to run after --, e.g. nkipy-ops precompile -- python train.py"
        )
    precompile.target_runtime(args.runtime, args.strict)  # fail before running anything
    cache = _cache_dir(args.cache)
    with tempfile.TemporaryDirectory(prefix="nkipy-precompile-") as scratch:
        report_path = Path(scratch) / "report.json"
        env = {
            **os.environ,
            "NKIPY_RUNTIME": "cpu",
            "NKIPY_PRECOMPILE": args.runtime,
            "NKIPY_CACHE": str(cache),
            precompile.REPORT_ENV: str(report_path),
        }
        if args.target:
            env["NKIPY_TARGET"] = args.target
        exit_code = subprocess.call(command, env=env)
        # no report: the command compiled nothing (or died before its exit handlers ran)
        counts = (
            json.loads(report_path.read_text())
            if report_path.exists()
            else precompile.Report().as_dict()
        )
    report = {"runtime": args.runtime, "cache": str(cache), "exit_code": exit_code, **counts}
    _emit(report, render_precompile(report), args.format)
    return exit_code or (1 if report["failed"] else EXIT_OK)


def _cache_dir(given: str | None) -> Path:
    """A ``DIR`` argument, else ``NKIPY_CACHE``, else ``./nkipy_cache`` (as the backend resolves it)."""
    return Path(given or os.environ.get("NKIPY_CACHE") or "nkipy_cache").resolve()


def cmd_stats(args: argparse.Namespace) -> int:
    """The per-kernel counters the last program run with this cache wrote at exit: calls, time
    and bytes per kernel (every rank's, summed, or ``--rank``'s)."""
    cache = _cache_dir(args.cache)
    runs = profiling.read_last_run(cache)
    if not runs:
        raise _UsageError(
            f"no kernel statistics under {cache}: run a program with nkipy_cache={cache} first"
        )
    if args.rank is not None:
        ranks = [r["rank"] for r in runs]
        runs = [r for r in runs if r["rank"] == args.rank]
        if not runs:
            raise _UsageError(
                f"the last run in {cache} has no rank {args.rank}; its ranks: {ranks}"
            )
    report = {
        "cache": str(cache),
        "runs": [
            {k: r[k] for k in ("rank", "world_size", "pid", "finished", "file")} for r in runs
        ],
        "kernels": kernel_rows(runs, args.sort),
    }
    _emit(report, render_stats(report), args.format)
    return EXIT_OK


# --------------------------------------------------------------------------- entry point


def cmd_new_pack(args: argparse.Namespace) -> int:
    """Write a new op pack and say how to install and test it."""
    try:
        root = new_pack.write_pack(args.name, Path(args.dir))
    except ValueError as exc:
        raise _UsageError(str(exc)) from exc
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    print(f"wrote the op pack {args.name} to {root}:")
    print("\n".join(f"  {f}" for f in files))
    print(
        f"next:\n  pip install -e '{root}[test]'\n  nkipy-ops list --pack {args.name}\n  pytest {root}"
    )
    return EXIT_OK


def _common_options(suppress_defaults: bool) -> argparse.ArgumentParser:
    """``--strict``/``--format``, accepted before or after the subcommand.

    The subcommand's copies default to SUPPRESS, so ``nkipy-ops --strict list`` is not reset to
    ``False`` by the subcommand's own default.
    """
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--strict",
        action="store_true",
        default=argparse.SUPPRESS if suppress_defaults else False,
        help="a plugin that fails to import or register is an error (exit 2), not a 'failed' row",
    )
    parent.add_argument(
        "--format",
        choices=("text", "json"),
        default=argparse.SUPPRESS if suppress_defaults else "text",
        help="output format (default: text)",
    )
    return parent


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nkipy-ops",
        description="Show what the installed nkipy plugins lower and whether this machine can run them.",
        parents=[_common_options(suppress_defaults=False)],
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {_distribution_version(CORE_DISTRIBUTION)}",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common_options(suppress_defaults=True)

    list_parser = commands.add_parser(
        "list",
        parents=[common],
        help="lowerings (op, provider, priority, overrides), plugins and runtimes",
        description="List lowering rules with their provider, then plugins and runtimes.",
    )
    list_parser.add_argument(
        "--pack", metavar="NAME", help="only ops this distribution lowers (e.g. nkipy-ops-base)"
    )
    list_parser.add_argument(
        "--coverage",
        choices=OPSETS,
        metavar="OPSET",
        help="report covered/total of an opset and what is missing (OPSET: core-aten)",
    )
    list_parser.set_defaults(handler=cmd_list)

    doctor = commands.add_parser(
        "doctor",
        parents=[common],
        help="versions, plugin status, runtime availability and what is missing",
        description="Diagnose the installation. Exit code 0 if a runtime is available (the one "
        "NKIPY_RUNTIME names, if set), else 1.",
    )
    doctor.set_defaults(handler=cmd_doctor)

    pre = commands.add_parser(
        "precompile",
        parents=[common],
        help="run a command and compile its kernels for a device this machine lacks",
        description="Run COMMAND (after --) on the cpu runtime while every kernel it compiles is also "
        "compiled for --runtime into the cache; then print kernels, compiled, cached, failed and "
        "compiler seconds. Copy the cache directory to the device host: nothing compiles there.",
    )
    pre.add_argument("--runtime", default="nrt", help="runtime to compile for (default: nrt)")
    pre.add_argument(
        "--cache",
        metavar="DIR",
        help="kernel cache directory (default: NKIPY_CACHE, else ./nkipy_cache)",
    )
    pre.add_argument("--target", help="hardware target to compile for (NKIPY_TARGET; e.g. trn2)")
    pre.add_argument("command_line", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    pre.set_defaults(handler=cmd_precompile)

    new = commands.add_parser(
        "new-pack",
        help="write a new op pack (pyproject, plugin module, tests, README) that passes its tests",
        description="Write a pip-installable op pack NAME into DIR/NAME: the nkipy entry point, a plugin "
        "module with one lowering rule and one decomposition, their tests (including OpInfo conformance) "
        "and a README.",
    )
    new.add_argument("name", metavar="NAME", help="distribution name, e.g. nkipy-ops-mine")
    new.add_argument("--dir", default=".", help="parent directory (default: the current one)")
    new.set_defaults(handler=cmd_new_pack)

    stats = commands.add_parser(
        "stats",
        parents=[common],
        help="time, calls and bytes per kernel of the last run with a cache",
        description="Print the per-kernel counters (calls, total and mean time, bytes in and out, "
        "the primitives each kernel runs) that the last program run with the kernel cache DIR wrote "
        "at exit, most total time first. A run of several ranks is summed unless --rank is given.",
    )
    stats.add_argument(
        "cache",
        nargs="?",
        metavar="DIR",
        help="kernel cache directory (default: NKIPY_CACHE, else ./nkipy_cache)",
    )
    stats.add_argument(
        "--sort",
        choices=tuple(STATS_SORTS),
        default="total",
        help="order of the rows (default: total time)",
    )
    stats.add_argument("--rank", type=int, help="only this rank's counters")
    stats.set_defaults(handler=cmd_stats)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit code (so tests can call it in-process).

    Errors we expect (a plugin failing in strict mode, a conflict between packs, a bad
    ``--pack``) become one line on stderr and exit code 2, never a traceback; argparse's own
    usage errors and ``--help`` keep their usual output and codes.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version (code 0 or None) and usage errors (code 2)
        return (
            exc.code if isinstance(exc.code, int) else EXIT_OK if exc.code is None else EXIT_ERROR
        )
    try:
        return args.handler(args)
    except (_UsageError, NkipyError) as exc:
        print(f"nkipy-ops: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        # `nkipy-ops list | head`: the reader left; don't let the interpreter's flush traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
