"""How every cache key of nkipy is built: one recipe per key, each hashing its parts with
``digest`` under a tag of its own, so two kinds of key never collide and a reader sees in one
place what invalidates each cache.

The callers gather the parts (they know FX graphs, rules and runtimes); this module only says
which parts make a key and in what order. A key holds what determines the result (graph, input
types, rules, versions, flags, target) and nothing about where it was made (paths, hosts,
ranks), so an entry moves between ranks and hosts unchanged. The one exception is the
AOTAutograd key, which holds the kernel cache directory: its entries refer to kernels there.

=====================  ==================================================  ========================
key                    parts                                               built by
=====================  ==================================================  ========================
``versions_key``       nkipy-core's version and sources, torch's version,  ``compiler.key_parts``
                       every loaded pack and its version                   (part of every key)
``plan_key``           graph code, input fake tensors and layouts, the     ``compiler.plan``
                       fingerprints of candidate rules, versions, runtime  (``index/`` on disk)
``fx_base``            versions, runtime, its target tag, compiler args    ``compiler.kernels``
``fx_key``             ``fx_base``, kernel graph code, input types and     ``compiler.kernels``
                       layouts, fingerprints of the rules chosen           (``index/`` on disk)
``kernel_key``         kernel IR text, runtime, target tag, compiler       ``compiler.kernels``
                       args, versions                                      (``kernels/`` on disk)
``aot_key``            versions, runtime and tag, the settings, the        ``dynamo.aot_cache``
                       decomposition table, every rule, packs' sources,    (torch's AOTAutograd
                       CPU-region annotations                              cache key tag)
=====================  ==================================================  ========================

Keys of in-memory caches are tuples, not digests, because they are looked up on every call:
``dynamo.specialize.size_key`` (shapes, strides and scalar values of a call),
``device.eager._signature`` and ``device.eager._fast_key`` (the op, its tensors' shapes, dtypes
and devices, its other arguments by value). Rule fingerprints (``LoweringRule.fingerprint``:
bytecode and source digests) come from ``plugin.registry``, which sits below this layer.
``docs/caching.md`` describes each cache for users.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

from nkipy_core.plugin.registry import code_digest, source_digest


def digest(*parts: str | bytes) -> str:
    """SHA-256 of ``parts``, each followed by a NUL byte (so ``("ab", "c")`` and ``("a", "bc")``
    differ)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def _lists(*groups: Iterable[str]) -> list[str]:
    """The parts of several lists, each preceded by its length, so that a part cannot move
    from one list to the next without changing the key."""
    parts: list[str] = []
    for group in groups:
        items = list(group)
        parts += [str(len(items)), *items]
    return parts


def versions_key(
    core_version: str, core_sources: str, torch_version: str, packs: Iterable[str]
) -> str:
    """What every key depends on: the code that computes a kernel (nkipy-core's primitives and
    codegen, the packs' rules) and torch, whose graphs it lowers. ``packs``: sorted
    ``name=provenance`` of every loaded pack."""
    return digest("versions", core_version, core_sources, torch_version, *_lists(packs))


def plan_key(
    code: str, inputs: Iterable[str], rules: Iterable[str], versions: str, runtime: str
) -> str:
    """The partition plan of a graph (which node lowers with which rule): its code, its
    inputs as a key sees them, the fingerprints of the rules that could lower its nodes."""
    return digest("plan", code, *_lists(inputs, rules), versions, runtime)


def fx_base(versions: str, runtime: str, target_tag: str, compiler_args: str) -> str:
    """What every ``fx_key`` of one configuration shares."""
    return digest("fx-base", versions, runtime, target_tag, compiler_args)


def fx_key(base: str, code: str, inputs: Iterable[str], rules: Iterable[str]) -> str:
    """The index entry of a kernel's FX graph (lowering input -> kernel key), so a warm process
    finds its kernel without lowering: the graph's code, its inputs' types and layouts, the
    fingerprints of the rules chosen for its nodes."""
    return digest("subgraph", base, code, *_lists(inputs, rules))


def kernel_key(
    ir_text: str, runtime: str, target_tag: str, compiler_args: str, versions: str
) -> str:
    """A compiled kernel: two graphs that lower to the same IR share it."""
    return digest("kernel", ir_text, runtime, target_tag, compiler_args, versions)


def aot_key(
    versions: str,
    runtime: str,
    target_tag: str,
    settings: str,
    decompositions: Iterable[str],
    rules: Iterable[str],
    sources: Iterable[str],
    regions: Iterable[str],
) -> str:
    """What nkipy adds to torch's AOTAutograd cache key for a dynamo graph: everything the
    compiled graph depends on beyond the graph's code and inputs (``dynamo.aot_cache``)."""
    return digest(
        "aot",
        versions,
        runtime,
        target_tag,
        settings,
        *_lists(decompositions, rules, sources, regions),
    )


def function_fingerprint(fn: Callable[..., Any]) -> str:
    """``module.qualname#bytecode digest:module source digest`` of a function (a decomposition
    a pack added): changes when its code or its module's sources do."""
    module = getattr(fn, "__module__", "") or ""
    sources = source_digest(module) if module else "-"
    return f"{module}.{getattr(fn, '__qualname__', fn)}#{code_digest(fn)}:{sources}"
