"""``nkipy-ops precompile -- CMD``: fill the kernel cache for a device this machine lacks while
CMD runs on the ``cpu`` runtime.
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
from nkipy_core.compiler import precompile


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


def cmd_precompile(args: argparse.Namespace) -> int:
    """Run the command on the ``cpu`` runtime with every kernel also compiled for ``--runtime``
    into the cache; print what was compiled. Exit code: the command's, else 1 if a kernel failed.

    The command runs in a child process, configured by environment variables only, so that any
    program (``python train.py``, ``torchrun ...``) works unchanged; it writes its counts to a
    file at exit (``nkipy_core.compiler.precompile``), which is read back here.
    """
    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
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
