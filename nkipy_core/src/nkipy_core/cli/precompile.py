"""``nkipy-ops precompile``: fill the kernel cache for a device this machine lacks.

Three ways: ``-- CMD`` compiles every kernel for the device while CMD runs on the ``cpu``
runtime; ``--record manifest.json -- CMD`` only records the kernels CMD needs (no device
compiler needed); ``--from manifest.json`` compiles a recorded manifest on a build machine
without running the program (``nkipy_core.compiler.manifest``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from nkipy_core.cli.command import EXIT_OK, UsageError, cache_dir
from nkipy_core.cli.format import emit, format_table
from nkipy_core.compiler import manifest, precompile
from nkipy_core.compiler.kernels import compile_listed
from nkipy_core.config import env
from nkipy_core.config.settings import current


def render_precompile(report: dict[str, Any]) -> str:
    if "manifest" in report and "exit_code" in report:  # --record
        return (
            f"Recorded {report['recorded']} kernels into {report['manifest']}\n"
            f"command exited with code {report['exit_code']}"
        )
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
    if "exit_code" in report:
        lines.append(f"command exited with code {report['exit_code']}")
    return "\n".join(lines)


def cmd_precompile(args: argparse.Namespace) -> int:
    """Run the command on the ``cpu`` runtime with every kernel also compiled for ``--runtime``
    into the cache; print what was compiled. Exit code: the command's, else 1 if a kernel failed.

    The command runs in a child process, configured by environment variables only, so that any
    program (``python train.py``, ``torchrun ...``) works unchanged; it writes its counts to a
    file at exit (``nkipy_core.compiler.precompile``), which is read back here.
    """
    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    if args.from_manifest is not None:
        if command or args.record:
            raise UsageError(
                "--from compiles a manifest without running a command: give no command"
            )
        return _from_manifest(args)
    if args.record is not None:
        if not command:
            raise UsageError(
                "give the command to record after --, e.g. nkipy-ops precompile --record m.json -- python train.py"
            )
        return _record(args, command)
    if not command:
        raise UsageError(
            "give the command to run after --, e.g. nkipy-ops precompile -- python train.py"
        )
    precompile.target_runtime(args.runtime, args.strict)  # fail before running anything
    cache = cache_dir(args.cache)
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
    emit(report, render_precompile(report), args.format)
    return exit_code or (1 if report["failed"] else EXIT_OK)


def _record(args: argparse.Namespace, command: list[str]) -> int:
    """Run the command on the ``cpu`` runtime, recording every kernel it lowers (nothing is
    compiled for a device, so no device compiler is needed here)."""
    path = Path(args.record).resolve()
    child = {
        **os.environ,
        "NKIPY_RUNTIME": "cpu",
        env.NKIPY_MANIFEST_RECORD.name: str(path),
        # a warm AOTAutograd cache would hand the program its graphs without lowering them
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
    }
    child.pop(env.NKIPY_PRECOMPILE.name, None)
    if args.cache:
        child["NKIPY_CACHE"] = str(cache_dir(args.cache))
    exit_code = subprocess.call(command, env=child)
    recorded = len(manifest.read(path)) if path.exists() else 0
    report = {"manifest": str(path), "recorded": recorded, "exit_code": exit_code}
    emit(report, render_precompile(report), args.format)
    return exit_code


def _from_manifest(args: argparse.Namespace) -> int:
    """Compile every kernel of a manifest for ``--runtime`` into the cache, in parallel."""
    runtime = precompile.target_runtime(args.runtime, args.strict)
    cache = cache_dir(args.cache)
    listed = manifest.kernels_of(Path(args.from_manifest))
    config = current().override(
        {"nkipy_cache": str(cache), **({"target": args.target} if args.target else {})}
    )
    counts = precompile.Report()
    compile_listed(listed, config, runtime, counts, jobs=args.jobs)
    report = {"runtime": args.runtime, "cache": str(cache), **counts.as_dict()}
    emit(report, render_precompile(report), args.format)
    return 1 if report["failed"] else EXIT_OK
