"""``nkipy-ops doctor``: versions, plugins, runtimes and the torch device, and why a compile would
fall back or fail here.
"""

from __future__ import annotations

import argparse
import platform
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy
import torch

from nkipy_core import _torch
from nkipy_core.cli.command import EXIT_NO_RUNTIME, EXIT_OK, loaded_plugins
from nkipy_core.cli.format import emit
from nkipy_core.cli.installed import plugin_rows, render_plugins, render_runtimes, runtime_rows
from nkipy_core.config.env import NKIPY_RUNTIME, TORCH_DEVICE_BACKEND_AUTOLOAD
from nkipy_core.plugin import manager as plugins

CORE_DISTRIBUTION = "nkipy-core"


def distribution_version(name: str) -> str:
    """The installed version of distribution ``name`` (``doctor``'s versions, ``--version``)."""
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
        CORE_DISTRIBUTION: distribution_version(CORE_DISTRIBUTION),
    }
    for status in loaded.statuses:
        found.setdefault(status.provenance.distribution, status.provenance.version)
    return found


def _selected_runtime(runtimes: list[dict[str, Any]]) -> dict[str, Any]:
    """What the backend would pick: ``NKIPY_RUNTIME`` if set, else the first available one."""
    requested = NKIPY_RUNTIME.get()
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


def device_status() -> dict[str, Any]:
    """Whether torch knows the ``nkipy`` device, how it was registered, and whether torch may
    pick it as the machine's accelerator (``torch.nkipy.is_available()``)."""
    from nkipy_core.buffers.device_contract import NAME
    from nkipy_core.device import module

    taken = _torch.privateuse1_backend_name()
    return {
        "name": NAME,
        "registered": taken == NAME,
        "autoload": TORCH_DEVICE_BACKEND_AUTOLOAD.get(),
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
        if row["details"]:
            lines.append(f"Runtime {row['name']!r}: {row['details']}")
    return "\n".join(lines)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Versions, plugins, runtimes and what each unavailable runtime needs.

    Exit code 1 when ``torch.compile(backend="nkipy")`` could not run here: no runtime is
    available, or ``NKIPY_RUNTIME`` names one that is missing or unavailable.
    """
    loaded = loaded_plugins(args)
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
    emit(report, render_doctor(report), args.format)
    return EXIT_OK if report["ok"] else EXIT_NO_RUNTIME
