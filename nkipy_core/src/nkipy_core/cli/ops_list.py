"""``nkipy-ops list``: who lowers each op, and whom it overrides; the plugins and runtimes; with
``--coverage``, what of an opset is still missing and what the packs say stays on CPU.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from nkipy_core.cli.command import EXIT_OK, UsageError, loaded_plugins
from nkipy_core.cli.coverage import coverage, render_coverage
from nkipy_core.cli.format import emit, table_section
from nkipy_core.cli.installed import plugin_rows, render_plugins, render_runtimes, runtime_rows
from nkipy_core.plugin import manager as plugins
from nkipy_core.plugin.registry import LoweringRule


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


def _resolve_pack(loaded: plugins.Plugins, pack: str | None) -> str | None:
    """The normalized ``--pack`` name; an unknown one is a usage error, not an empty table."""
    if pack is None:
        return None
    wanted = normalize_distribution(pack)
    known = {normalize_distribution(s.provenance.distribution) for s in loaded.statuses}
    if wanted not in known:
        raise UsageError(
            f"no installed distribution named {pack!r} provides nkipy plugins; "
            f"installed: {', '.join(sorted(known)) or 'none'}"
        )
    return wanted


def render_lowerings(rows: list[dict[str, Any]], pack: str | None) -> str:
    hint = f"from {pack}" if pack else "installed (install nkipy-ops-base for the core ATen opset)"
    return table_section(
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


def cmd_list(args: argparse.Namespace) -> int:
    """Lowerings, plugins and runtimes; or, with ``--coverage``, the opset coverage report."""
    loaded = loaded_plugins(args)
    pack = _resolve_pack(loaded, args.pack)
    rows = lowering_rows(loaded, pack)
    if args.coverage:
        notes = [
            n
            for n in loaded.lowerings.cpu_notes()
            if pack is None or normalize_distribution(n.provenance.distribution) == pack
        ]
        report = coverage((r["op"] for r in rows), args.coverage, notes)
        emit({"pack": pack, **report}, render_coverage(report, pack), args.format)
        return EXIT_OK
    plugin_data, runtime_data = plugin_rows(loaded), runtime_rows(loaded)
    data = {"pack": pack, "lowerings": rows, "plugins": plugin_data, "runtimes": runtime_data}
    text = "\n\n".join(
        [render_lowerings(rows, pack), render_plugins(plugin_data), render_runtimes(runtime_data)]
    )
    failed = sum(p["status"] != "ok" for p in plugin_data)
    if failed:
        text += f"\n\n{failed} plugin(s) were skipped (failed or incompatible); --strict makes this an error."
    emit(data, text, args.format)
    return EXIT_OK
