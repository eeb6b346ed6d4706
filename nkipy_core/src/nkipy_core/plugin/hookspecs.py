"""The hooks a nkipy plugin may implement (pluggy project name ``nkipy``).

A plugin is a module (or any object) registered under the entry-point group ``nkipy``::

    # pyproject.toml of a pack
    [project.entry-points.nkipy]
    my_pack = "my_pack.plugin"

    # my_pack/plugin.py
    from nkipy_core import hookimpl, knp

    @hookimpl
    def nkipy_register_lowerings(registry):
        registry.register(torch.ops.aten.exp.default, lambda ctx, x: knp.exp(x))

The hooks are versioned (``nkipy_core.plugin.hook_api.HOOK_API_VERSION``); a pack states the range it
supports in its plugin module (``NKIPY_HOOK_API = ">=1.0,<2"``), and a hook is removed only after
a minor release in which its spec warns (pluggy's ``warn_on_impl``): docs/writing-a-pack.md.

Every registration hook is called once per plugin, with a registry that stamps each entry
with the plugin's distribution and version, so ``nkipy-ops list`` can say who gave what.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from nkipy_core.config.settings import Config
    from nkipy_core.plugin.registry import DecompositionRegistry, LoweringRegistry, RuntimeRegistry

hookspec = pluggy.HookspecMarker("nkipy")
hookimpl = pluggy.HookimplMarker("nkipy")


@hookspec
def nkipy_register_lowerings(registry: LoweringRegistry) -> None:
    """Add lowering rules: ATen overload -> rule over ``knp`` traced tensors.

    Called once per plugin when plugins are loaded. A rule is ``rule(ctx, *args, **kwargs)`` with
    the ATen schema's arguments (tensors are traced, the rest are Python values) and returns a
    traced tensor or a tuple of them; it may ``raise Unsupported("reason")`` to decline one node.
    Higher ``priority`` wins; equal priority from two providers is a ``PluginConflictError``.

    Example::

        @hookimpl
        def nkipy_register_lowerings(registry):
            @registry.register(torch.ops.aten.silu.default)
            def silu(ctx, x):
                return x * knp.sigmoid(x)
    """


@hookspec
def nkipy_register_decompositions(registry: DecompositionRegistry) -> None:
    """Add or remove decompositions applied before lowering (after the core ATen ones).

    Example::

        @hookimpl
        def nkipy_register_decompositions(registry):
            registry.remove(torch.ops.aten.gelu.default)  # we lower gelu directly
    """


@hookspec
def nkipy_register_runtimes(registry: RuntimeRegistry) -> None:
    """Add device runtimes (objects following ``nkipy_core.runtime.Runtime``).

    Example::

        @hookimpl
        def nkipy_register_runtimes(registry):
            registry.register(MyRuntime())
    """


@hookspec
def nkipy_graph_passes(stage: str, runtime: Any) -> list[Any] | None:
    """Return FX passes (``GraphModule -> None``, mutating in place) to run at ``stage``.

    ``stage`` is ``"aten"``: the functional ATen graph after decompositions, before
    partitioning (e.g. to replace a pattern by a call to an NKI kernel op). ``runtime`` is the
    runtime the graph's kernels will run on: a pass that introduces work only some runtimes run
    inside kernels (custom calls, see ``Runtime``) should return nothing for the others.
    Implementations may leave out ``runtime`` from their parameters.

    Example::

        @hookimpl
        def nkipy_graph_passes(stage):
            return [fuse_rmsnorm] if stage == "aten" else None
    """


@hookspec
def nkipy_configure(config: Config) -> None:
    """See the resolved configuration once, when the backend is first used or initialised."""
