"""The parts of cache keys that the compiler gathers besides its graph: the installed packs and
core, a graph input's layout, the runtime's target. The recipes that hash them into keys are in
``nkipy_core.cache.keys``; these parts go into the plan, FX-index and kernel keys, and into the
keys of the graphs stored in torch's AOTAutograd cache (``nkipy_core.dynamo.aot_cache``).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import torch
import torch.fx

from nkipy_core.cache import keys
from nkipy_core.compiler.lowering import Layout
from nkipy_core.plugin import manager as plugins
from nkipy_core.plugin.registry import source_digest
from nkipy_core.runtime.base import CompileOptions


def core_version() -> str:
    """The installed nkipy-core's version, recorded in keys and in each kernel's cache entry."""
    try:
        return version("nkipy-core")
    except PackageNotFoundError:
        return "unknown"


def versions_key() -> str:
    """The installed plugin distributions and versions, and the core's own sources (its
    primitives and codegen define what a kernel computes): part of every cache key."""
    providers = sorted(f"{s.name}={s.provenance}" for s in plugins.get().statuses if s.ok)
    return keys.versions_key(
        core_version(), source_digest("nkipy_core"), torch.__version__, providers
    )


def placeholder_key(node: torch.fx.Node) -> str:
    """A graph input as a cache key sees it: its fake tensor, and its layout, which rules may
    read (``LoweringContext.layouts``) and which shapes alone do not determine."""
    val = node.meta.get("val")
    layout = Layout.of(val)
    return f"{val}" if layout is None else f"{val}/{layout.stride}+{layout.storage_offset}"


def runtime_tag(runtime, options: CompileOptions) -> str:
    """What the runtime says its artifacts depend on beyond the IR (its hardware target)."""
    cache_tag = getattr(runtime, "cache_tag", None)
    return cache_tag(options) if cache_tag is not None else ""
