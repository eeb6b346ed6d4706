"""The installed plugins and runtimes, as rows and as tables: what ``nkipy-ops list`` and
``nkipy-ops doctor`` both show.
"""

from __future__ import annotations

from typing import Any

from nkipy_core.cli.format import table_section
from nkipy_core.plugin import manager as plugins


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
                "hardware": _hardware(runtime),
                "available": ok,
                "reason": reason,
                # a hardware runtime says what it would compile for even where it cannot run
                # (a build box that precompiles for it)
                "details": _details(runtime) if ok or _hardware(runtime) else "",
            }
        )
    return rows


def _hardware(runtime: Any) -> bool:
    return bool(getattr(runtime, "hardware", False))


def _details(runtime: Any) -> str:
    """What a runtime runs on or compiles for, if it says (the optional ``Runtime.describe``)."""
    describe = getattr(runtime, "describe", None)
    if describe is None:
        return ""
    try:
        return describe()
    except Exception as exc:  # noqa: BLE001 - the doctor reports, it does not crash
        return f"describe() raised {type(exc).__name__}: {exc}"


def render_plugins(rows: list[dict[str, Any]]) -> str:
    return table_section(
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
    return table_section(
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
