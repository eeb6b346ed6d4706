"""The plugin manager: discovers ``nkipy`` entry points and builds the registries from them.

A plugin that fails to import or to register is recorded as failed and skipped, so one broken
pack never takes the others down; one whose ``NKIPY_HOOK_API`` range excludes this core's hook
API (``hook_api``) is recorded as incompatible and not imported at all. ``strict=True`` raises
``PluginError`` instead of skipping either. The loaded
state is the one piece of process-wide state besides the configuration; ``reload()`` rebuilds it
(after installing a pack, or in tests after ``register``-ing a plugin object).
"""

from __future__ import annotations

import functools
import logging
import threading
from importlib.metadata import entry_points
from typing import Any

import attrs
import pluggy

from nkipy_core.errors import PluginConflictError, PluginError
from nkipy_core.plugin import hook_api, hookspecs
from nkipy_core.plugin.registry import (
    DecompositionRegistry,
    LoweringRegistry,
    Provenance,
    RuntimeRegistry,
)

log = logging.getLogger("nkipy.plugins")

ENTRY_POINT_GROUP = "nkipy"
#: cheap probes of accelerator hardware (``() -> bool``), one per pack that ships a hardware runtime
HARDWARE_GROUP = "nkipy.hardware"
_REGISTRATION_HOOKS = {
    "nkipy_register_lowerings": "lowerings",
    "nkipy_register_decompositions": "decompositions",
    "nkipy_register_runtimes": "runtimes",
}


@attrs.frozen
class PluginStatus:
    """One discovered plugin: where it came from and whether it loaded."""

    name: str
    module: str
    provenance: Provenance
    ok: bool
    error: str = ""
    #: the hook API range the plugin declares ("" if none)
    hook_api: str = ""
    #: skipped without being imported because ``hook_api`` excludes this core's hook API
    incompatible: bool = False


@attrs.define
class Plugins:
    """Everything the installed plugins contributed."""

    manager: pluggy.PluginManager
    statuses: list[PluginStatus]
    lowerings: LoweringRegistry
    decompositions: DecompositionRegistry
    runtimes: RuntimeRegistry

    def failed(self) -> list[PluginStatus]:
        return [s for s in self.statuses if not s.ok]


@attrs.frozen
class _Candidate:
    name: str
    provenance: Provenance
    load: Any  # () -> plugin object
    declared: Any  # () -> the hook API range it declares, or None; called before ``load``


_lock = threading.RLock()
_loaded: Plugins | None = None
_extra: list[_Candidate] = []


def register(
    plugin: Any, name: str, distribution: str = "<in-process>", version: str = "0"
) -> None:
    """Add a plugin object (e.g. a module) without an entry point; takes effect at ``reload()``."""
    _extra.append(
        _Candidate(
            name,
            Provenance(name, distribution, version),
            lambda: plugin,
            lambda: hook_api.declared_by(plugin),
        )
    )


def unregister(name: str) -> None:
    _extra[:] = [c for c in _extra if c.name != name]


@functools.cache
def hardware_present() -> bool:
    """Whether a probe in the ``nkipy.hardware`` entry-point group sees accelerator hardware.

    torch asks ``torch.nkipy.is_available()`` in every program that dynamo compiles and in every
    ``torch.accelerator`` query, nkipy user or not. Loading the plugins to answer would import every
    pack into unrelated programs; a probe (nkipy-runtime registers
    ``nkipy_runtime.nrt.probe:hardware_present``) only looks at the machine. Asked once per process: hardware does not come and go. A probe that fails is
    logged and counts as no hardware.
    """
    for ep in sorted(entry_points(group=HARDWARE_GROUP), key=lambda e: e.name):
        try:
            if ep.load()():
                return True
        except Exception as exc:  # noqa: BLE001 - a broken probe must not break torch's query
            log.warning("nkipy hardware probe %r failed: %s: %s", ep.name, type(exc).__name__, exc)
    return False


def _entry_point_candidates() -> list[_Candidate]:
    found = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(ep, "dist", None)
        provenance = Provenance(
            ep.name, dist.metadata["Name"] if dist else "<unknown>", dist.version if dist else "?"
        )
        found.append(
            _Candidate(
                ep.name,
                provenance,
                ep.load,
                lambda module=ep.module: hook_api.declared_range(module),
            )
        )
    return found


def _fail(candidate: _Candidate, what: str, exc: BaseException, strict: bool) -> PluginStatus:
    message = f"{what}: {type(exc).__name__}: {exc}"
    if strict:
        raise PluginError(
            f"plugin {candidate.name!r} ({candidate.provenance}) failed to {message}. "
            "Fix or uninstall it, or run without strict mode to skip it."
        ) from exc
    log.warning(
        "nkipy plugin %r (%s) skipped: failed to %s", candidate.name, candidate.provenance, message
    )
    return PluginStatus(candidate.name, "", candidate.provenance, False, message)


def _incompatible(candidate: _Candidate, declared: str, reason: str, strict: bool) -> PluginStatus:
    if strict:
        raise PluginError(
            f"plugin {candidate.name!r} ({candidate.provenance}) was not loaded: {reason}."
        )
    log.warning("nkipy plugin %r (%s) not loaded: %s", candidate.name, candidate.provenance, reason)
    return PluginStatus(
        candidate.name, "", candidate.provenance, False, reason, declared, incompatible=True
    )


def _build(strict: bool) -> Plugins:
    manager = pluggy.PluginManager("nkipy")
    manager.add_hookspecs(hookspecs)
    lowerings, decompositions, runtimes = (
        LoweringRegistry(),
        DecompositionRegistry(),
        RuntimeRegistry(),
    )
    registries: dict[str, LoweringRegistry | DecompositionRegistry | RuntimeRegistry] = {
        "lowerings": lowerings,
        "decompositions": decompositions,
        "runtimes": runtimes,
    }
    statuses = []
    for candidate in [*_entry_point_candidates(), *_extra]:
        declared = candidate.declared()
        reason = hook_api.incompatibility(declared)
        if reason:
            statuses.append(_incompatible(candidate, declared, reason, strict))
            continue
        try:
            plugin = candidate.load()
            manager.register(plugin, name=candidate.name)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the others
            statuses.append(_fail(candidate, "import", exc, strict))
            continue
        try:
            for hook_name, kind in _REGISTRATION_HOOKS.items():
                for impl in getattr(manager.hook, hook_name).get_hookimpls():
                    if impl.plugin is plugin:
                        impl.function(registries[kind].bound(candidate.provenance))
        except PluginConflictError:
            raise
        except Exception as exc:  # noqa: BLE001
            manager.unregister(plugin)
            statuses.append(_fail(candidate, "register", exc, strict))
            continue
        module = getattr(plugin, "__name__", type(plugin).__name__)
        statuses.append(
            PluginStatus(
                candidate.name, module, candidate.provenance, True, hook_api=declared or ""
            )
        )
    return Plugins(manager, statuses, lowerings, decompositions, runtimes)


def get(strict: bool = False) -> Plugins:
    """The loaded plugins (loaded on first use)."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _build(strict)
        elif strict and _loaded.failed():
            bad = _loaded.failed()[0]
            raise PluginError(
                f"plugin {bad.name!r} ({bad.provenance}) failed to {bad.error} (strict mode)"
            )
        return _loaded


def reload(strict: bool = False) -> Plugins:
    """Discard the loaded plugins and discover them again."""
    global _loaded
    with _lock:
        _loaded = None
        return get(strict)
