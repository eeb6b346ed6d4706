"""``nkipy-ops``: what the installed nkipy plugins provide, and whether this machine can run them.

``nkipy-ops list`` answers "who lowers this op, and who did it override?" (and, with
``--coverage core-aten``, "what is still missing?"); ``nkipy-ops doctor`` answers "why does my
compile fall back or fail here?"; ``nkipy-ops precompile -- CMD`` fills the kernel cache for a
device this machine lacks while CMD runs on the ``cpu`` runtime. Both read the same plugin state the backend uses
(``nkipy_core.plugin.manager.get()``), so what they show is what ``torch.compile`` will do.
``nkipy-ops stats DIR`` answers "which kernels did my last run spend its time in?" from the
counters a program writes under its kernel cache at exit (``nkipy_core.observe.profiling``).
``nkipy-ops explain DIR`` answers "why did my function compile so many kernel graphs?" from the
line each compile appends there (``nkipy_core.observe.recompiles``). ``nkipy-ops cache`` lists,
checks, prunes, exports and imports the kernel cache.

Each command is a module of this package (``ops_list``, ``coverage``, ``doctor``, ``precompile``,
``stats``, ``explain``, ``new_pack``, ``cache``) over shared parts (``command``: exit codes and
the usage error;
``format``: tables and ``--format``; ``installed``: the plugin and runtime rows); this one holds
the argument parser and the dispatch to them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from nkipy_core.cli import cache
from nkipy_core.cli.command import EXIT_ERROR, EXIT_OK, UsageError
from nkipy_core.cli.coverage import OPSETS
from nkipy_core.cli.doctor import CORE_DISTRIBUTION, cmd_doctor, distribution_version
from nkipy_core.cli.explain import cmd_explain
from nkipy_core.cli.new_pack import cmd_new_pack
from nkipy_core.cli.ops_list import cmd_list
from nkipy_core.cli.precompile import cmd_precompile
from nkipy_core.cli.stats import STATS_SORTS, cmd_stats
from nkipy_core.errors import NkipyError


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
        version=f"%(prog)s {distribution_version(CORE_DISTRIBUTION)}",
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
        help="report covered/total of an opset, what is missing and what stays on CPU, with "
        "the packs' reasons (OPSET: core-aten)",
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
    pre.add_argument(
        "--record",
        metavar="MANIFEST",
        help="only record the kernels COMMAND needs into MANIFEST (JSON), compiling nothing",
    )
    pre.add_argument(
        "--from",
        dest="from_manifest",
        metavar="MANIFEST",
        help="compile every kernel of MANIFEST for --runtime, without running a command",
    )
    pre.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="compiles at once with --from (default: one per core if the compiler is a process)",
    )
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

    explain = commands.add_parser(
        "explain",
        parents=[common],
        help="kernel graphs per compiled function and why each recompile happened",
        description="Summarise the compiles recorded in the kernel cache DIR: per compiled "
        "function, how many kernel graphs it needed and, grouped, what differed from the nearest "
        "graph already compiled (an input's size, stride or dtype, or a guard).",
    )
    explain.add_argument(
        "cache",
        nargs="?",
        metavar="DIR",
        help="kernel cache directory (default: NKIPY_CACHE, else ./nkipy_cache)",
    )
    explain.add_argument(
        "--all",
        action="store_true",
        help="every recorded run, not only the last one (each rank's last process)",
    )
    explain.set_defaults(handler=cmd_explain)

    cache.add_parser(commands, common)
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
    except (UsageError, NkipyError) as exc:
        print(f"nkipy-ops: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        # `nkipy-ops list | head`: the reader left; don't let the interpreter's flush traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
