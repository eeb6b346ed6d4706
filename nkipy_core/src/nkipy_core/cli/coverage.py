"""``nkipy-ops list --coverage OPSET``: how much of an opset the lowered ops cover, what is
excluded by design (``coverage_exclusions``), what is still missing, and what the packs say
stays on CPU, with their reasons (``LoweringRegistry.stays_on_cpu``), whatever the opset.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from nkipy_core import _torch
from nkipy_core.cli.coverage_exclusions import EXCLUSIONS
from nkipy_core.plugin.registry import CpuNote, op_name

OPSETS = ("core-aten",)


def core_aten_ops() -> list[str]:
    """Every ATen overload tagged ``torch.Tag.core`` in the installed torch (its core opset).

    The dispatcher is asked for every registered op name, because ``dir(torch.ops.aten)``
    only lists packets that were already touched in this process.
    """
    found = set()
    for name in _torch.all_op_names():
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


def coverage(
    lowered: Iterable[str], opset: str = "core-aten", cpu_notes: Iterable[CpuNote] = ()
) -> dict[str, Any]:
    """How much of ``opset`` the given lowered ops cover; what is excluded by design, with the
    reason (``coverage_exclusions``); the exact list that is still missing; and ``cpu_notes``,
    what the packs say stays on CPU (all of an op, or the inputs its rule declines)."""
    if opset not in OPSETS:
        raise ValueError(f"unknown opset {opset!r}; known: {', '.join(OPSETS)}")
    wanted = core_aten_ops()
    have = set(lowered)
    stays = [
        {
            "op": n.op,
            "reason": n.reason,
            "provider": n.provenance.distribution,
            "lowered_otherwise": n.op in have,
        }
        for n in cpu_notes
    ]
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
        "stays_on_cpu": stays,
    }


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
    stays = report["stays_on_cpu"]
    if stays:
        lines.append(
            f"stays on CPU ({len(stays)}), as the packs say; an op marked * is lowered for "
            "other inputs:"
        )
        width = max(len(e["op"]) for e in stays) + 1
        lines.extend(
            f"  {(e['op'] + ('*' if e['lowered_otherwise'] else '')).ljust(width)}  "
            f"{e['reason']} ({e['provider']})"
            for e in stays
        )
    return "\n".join(lines)
