"""Registries that plugins fill: lowering rules, decompositions and runtimes, with provenance.

Each hook call gets a view of a registry bound to the calling plugin's ``Provenance``; the
entries it adds carry that provenance, so conflicts and listings can name distributions.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import torch

from nkipy_core import _torch
from nkipy_core.errors import PluginConflictError

LoweringFn = Callable[..., Any]


@attrs.frozen
class Provenance:
    """Who registered an entry: the plugin name and the distribution (and version) behind it."""

    plugin: str
    distribution: str
    version: str

    def __str__(self) -> str:
        return f"{self.distribution} {self.version}"


def op_name(op: Any) -> str:
    """Canonical name of an ATen overload: ``aten::add.Tensor`` (``.default`` is kept)."""
    if isinstance(op, str):
        return op if "." in op.split("::")[-1] else f"{op}.default"
    if isinstance(op, _torch.OpOverload):
        return f"{_torch.schema(op).name}.{_torch.overload_name(op)}"
    raise TypeError(f"expected an ATen overload such as torch.ops.aten.add.Tensor, got {op!r}")


def _overloads(op: Any) -> list[str]:
    if isinstance(op, _torch.OpOverloadPacket):
        return [op_name(getattr(op, name)) for name in op.overloads()]
    return [op_name(op)]


def resolve_op(name: str) -> _torch.OpOverload:
    """The ``OpOverload`` for ``aten::add.Tensor``."""
    qualified, overload = name.rsplit(".", 1)
    namespace, packet = qualified.split("::")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload)


@attrs.frozen
class LoweringRule:
    op: str
    fn: LoweringFn
    priority: int
    provenance: Provenance
    #: the rule also lowers nodes with complex tensors among their inputs or results, which it
    #: gets as their real views (``LoweringContext.complex_args``); other rules never see them
    complex: bool = False

    @property
    def qualname(self) -> str:
        return f"{self.fn.__module__}.{self.fn.__qualname__}"

    @property
    def location(self) -> str:
        try:
            file = inspect.getsourcefile(self.fn)
            line = inspect.getsourcelines(self.fn)[1]
        except (OSError, TypeError):
            return self.qualname
        return f"{file}:{line}"

    def describe(self) -> str:
        return f"{self.qualname} from {self.provenance}"

    @functools.cached_property
    def fingerprint(self) -> str:
        """Identity of the rule, its code and the sources of its package (the helpers and
        tables it may use), so editing a pack in an editable install invalidates the kernels
        it built even when the pack's version is unchanged. Computed once per rule: neither
        can change in a running process, and every compile's cache keys ask for it."""
        kinds = "+complex" if self.complex else ""
        return f"{self.qualname}{kinds}@{self.provenance}#{code_digest(self.fn)}:{source_digest(self.fn.__module__)}"


@functools.cache
def source_digest(module_name: str) -> str:
    """Digest of the Python sources of the top-level package (or lone module) holding
    ``module_name``; ``-`` for code without files. Computed once per process."""
    top = sys.modules.get(module_name.split(".")[0])
    file = getattr(top, "__file__", None)
    if file is None:
        return "-"
    path = Path(file)
    files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(path.parent).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def code_digest(fn: Callable[..., Any]) -> str:
    """Digest of a function's bytecode and constants (rules built by ``exec`` have no file)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return "?"
    h = hashlib.sha256()
    stack = [code]
    while stack:
        c = stack.pop()
        h.update(c.co_code)
        for const in c.co_consts:
            if hasattr(const, "co_code"):
                stack.append(const)
            else:
                h.update(repr(const).encode())
    return h.hexdigest()[:16]


@attrs.frozen
class CpuNote:
    """A pack's statement that an op (or some of its inputs) stays on CPU, and why.

    Without it, a user whose op falls back reads "no installed pack lowers it" and cannot tell
    work left to do from a decision; with it, the fallback warning, strict mode's error and
    ``nkipy-ops list --coverage`` give the pack's reason."""

    op: str
    reason: str
    provenance: Provenance


class LoweringRegistry:
    """ATen overload name -> rules, best first. ``register`` works as a decorator too."""

    def __init__(self) -> None:
        self._rules: dict[str, list[LoweringRule]] = {}
        self._cpu_notes: dict[str, list[CpuNote]] = {}
        self._provenance: Provenance | None = None

    def bound(self, provenance: Provenance) -> LoweringRegistry:
        """A view that stamps what it registers with ``provenance`` (shares the storage)."""
        view = object.__new__(LoweringRegistry)
        view._rules, view._cpu_notes, view._provenance = self._rules, self._cpu_notes, provenance
        return view

    def register(
        self, op: Any, fn: LoweringFn | None = None, *, priority: int = 0, complex: bool = False
    ):
        """Register ``fn`` for an overload (or every overload of a packet); with ``complex``,
        for its nodes with complex tensors too (``LoweringRule.complex``)."""
        if fn is None:
            return lambda f: self.register(op, f, priority=priority, complex=complex) or f
        provenance = self._provenance or Provenance("<direct>", "<unregistered>", "0")
        for name in _overloads(op):
            rule = LoweringRule(name, fn, priority, provenance, complex)
            rules = self._rules.setdefault(name, [])
            for other in rules:
                if other.priority == priority:
                    raise PluginConflictError(
                        f"{name} is lowered at priority {priority} by both {other.describe()} and "
                        f"{rule.describe()}. Uninstall one of the packs, or register one of them "
                        "with a different priority."
                    )
            rules.append(rule)
            rules.sort(key=lambda r: -r.priority)
        return fn

    def stays_on_cpu(self, op: Any, reason: str) -> None:
        """Say that ``op`` (every overload of a packet) stays on CPU and why (hook API 1.2).

        For an op no rule lowers, the reason replaces "no installed pack lowers it" in the
        fallback warning; for one whose rule declines some inputs, ``reason`` names those
        inputs. Either way ``nkipy-ops list --coverage`` lists it."""
        provenance = self._provenance or Provenance("<direct>", "<unregistered>", "0")
        for name in _overloads(op):
            self._cpu_notes.setdefault(name, []).append(CpuNote(name, reason, provenance))

    def cpu_notes(self, op: Any = None) -> list[CpuNote]:
        """The notes on ``op``, or on every op (sorted by op) when it is ``None``."""
        if op is not None:
            return list(self._cpu_notes.get(op_name(op), ()))
        return [note for name in sorted(self._cpu_notes) for note in self._cpu_notes[name]]

    def unlowered_reason(self, op: Any) -> str:
        """Why ``op`` has no rule: the packs' notes on it, or that no installed pack lowers it."""
        notes = self.cpu_notes(op)
        if not notes:
            return "no installed pack lowers it"
        return "; ".join(f"{n.reason} ({n.provenance.distribution})" for n in notes)

    def rules_for(self, op: Any) -> list[LoweringRule]:
        return list(self._rules.get(op_name(op), ()))

    def ops(self) -> list[str]:
        return sorted(self._rules)

    def all_rules(self) -> Iterable[LoweringRule]:
        for name in self.ops():
            yield from self._rules[name]


class DecompositionRegistry:
    """Decompositions added or removed by plugins, applied on top of the core ATen table."""

    def __init__(self) -> None:
        self.added: dict[str, tuple[Callable[..., Any], Provenance | None]] = {}
        self.removed: dict[str, Provenance | None] = {}
        self._provenance: Provenance | None = None

    def bound(self, provenance: Provenance) -> DecompositionRegistry:
        view = object.__new__(DecompositionRegistry)
        view.added, view.removed, view._provenance = self.added, self.removed, provenance
        return view

    def add(self, op: Any, fn: Callable[..., Any] | None = None):
        if fn is None:
            return lambda f: self.add(op, f) or f
        for name in _overloads(op):
            self.added[name] = (fn, self._provenance)
        return fn

    def remove(self, op: Any) -> None:
        for name in _overloads(op):
            self.removed[name] = self._provenance

    def table(self, lowered: Iterable[str]) -> dict[Any, Callable[..., Any]]:
        """Core ATen decompositions plus added, minus removed and minus ops a pack lowers."""
        table = dict(_core_aten_table())
        table.update({name: (resolve_op(name), fn) for name, (fn, _) in self.added.items()})
        for name in (*self.removed, *lowered):
            if name not in self.added:
                table.pop(name, None)
        return dict(table.values())


#: core ATen decompositions that are wrong inside a training graph. The CPU flash-attention
#: decomposition (meant for export) returns the attention probabilities where the op returns the
#: log-sum-exp that its backward reads, so gradients would be silently wrong; inductor excludes it
#: too. Without a lowering the op simply runs on CPU.
_EXCLUDED = frozenset({"aten::_scaled_dot_product_flash_attention_for_cpu.default"})


@functools.cache
def _core_aten_table() -> dict[str, tuple[Any, Callable[..., Any]]]:
    """torch's core ATen decompositions by op name (building it takes ~0.2 s: done once)."""
    return {
        op_name(op): (op, fn)
        for op, fn in _torch.core_aten_decompositions().items()
        if isinstance(op, _torch.OpOverload) and op_name(op) not in _EXCLUDED
    }


class RuntimeRegistry:
    """Runtime name -> (runtime object, provenance)."""

    def __init__(self) -> None:
        self._runtimes: dict[str, tuple[Any, Provenance | None]] = {}
        self._provenance: Provenance | None = None

    def bound(self, provenance: Provenance) -> RuntimeRegistry:
        view = object.__new__(RuntimeRegistry)
        view._runtimes, view._provenance = self._runtimes, provenance
        return view

    def register(self, runtime: Any) -> None:
        if runtime.name in self._runtimes:
            _, other = self._runtimes[runtime.name]
            raise PluginConflictError(
                f"runtime {runtime.name!r} is registered by both {other} and {self._provenance}; "
                "uninstall one of them"
            )
        self._runtimes[runtime.name] = (runtime, self._provenance)

    def get(self, name: str) -> Any | None:
        entry = self._runtimes.get(name)
        return entry[0] if entry else None

    def provenance(self, name: str) -> Provenance | None:
        return self._runtimes[name][1]

    def names(self) -> list[str]:
        return sorted(self._runtimes, key=lambda n: (-self._runtimes[n][0].priority, n))


class RuleSet:
    """Rules a pack declares at import time with a decorator and installs from its hook::

    rules = RuleSet()

    @rules.register(torch.ops.aten.exp.default)
    def exp(ctx, x):
        return knp.exp(x)

    @hookimpl
    def nkipy_register_lowerings(registry):
        rules.install(registry)
    """

    def __init__(self, priority: int = 0) -> None:
        self.priority = priority
        self._entries: list[tuple[Any, LoweringFn, int, bool]] = []
        self._cpu_notes: list[tuple[Any, str]] = []

    def register(self, *ops: Any, priority: int | None = None, complex: bool = False):
        """Decorate the rule of ``ops``; ``complex`` as in ``LoweringRegistry.register``."""

        def decorate(fn: LoweringFn) -> LoweringFn:
            chosen = self.priority if priority is None else priority
            for op in ops:
                self._entries.append((op, fn, chosen, complex))
            return fn

        return decorate

    def stays_on_cpu(self, op: Any, reason: str) -> None:
        """Declare, beside the rules, what stays on CPU (``LoweringRegistry.stays_on_cpu``)."""
        self._cpu_notes.append((op, reason))

    def install(self, registry: LoweringRegistry) -> None:
        for op, fn, priority, complex_ in self._entries:
            registry.register(op, fn, priority=priority, complex=complex_)
        for op, reason in self._cpu_notes:
            registry.stays_on_cpu(op, reason)

    def __len__(self) -> int:
        return len(self._entries)
