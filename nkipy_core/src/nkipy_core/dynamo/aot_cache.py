"""Warm starts through torch's AOTAutograd cache: a new process skips AOTAutograd's trace.

Every process that compiles a model runs dynamo, then AOTAutograd (which traces the model again
into functional forward/backward graphs), then nkipy's ``compile_graph`` on each graph. nkipy's
kernel cache makes the last step cheap in a warm process (nothing is lowered), but AOTAutograd's
trace is the larger cost. torch skips it when its AOTAutograd cache holds an entry for the same
dynamo graph, which it writes only for compilers that are ``SerializableAOTDispatchCompiler``
returning an ``OutputCode`` it can pickle (as inductor's are, and torch's ``aot_eager``).

``NkipyGraph`` is that ``OutputCode``. It pickles two forms of a graph. The first is what
``compile_graph`` returned (``nkipy_core.dynamo.stored_graph``): its nodes, each kernel call as a key
into nkipy's kernel cache, its fallback warnings. A hit rebuilds the callable from it, loading
each kernel's executable by its key, and gives the same fallback warnings, random-op seeding,
input-mutation write-backs, output placement and kernel calls as the process that compiled it;
nothing is planned, partitioned or lowered. The second is the graph AOTAutograd handed to nkipy
(ATen ops, each node with its fake value and CPU-region annotation), kept for when the first
cannot be used: a kernel missing from nkipy's cache (or corrupt) makes the hit run
``compile_graph`` on it, which lowers that kernel again, so the two caches need not be kept in
step; so does a compiled graph the first form cannot hold (``stored_graph`` says which, and the
reason is logged at INFO). ``cache_stats()`` counts each graph a hit rebuilt from its kernels as
``aot_cache_restored`` and each it compiled again as ``aot_cache_recompiled``. Graphs compiled
with ``precompile`` (kernels for another runtime too) are always compiled again, as that
compile is what fills the other runtime's cache.

The entries live in torch's cache directory (``TORCHINDUCTOR_CACHE_DIR``) under keys torch
computes from the dynamo graph, its inputs and torch's configuration. ``caching`` adds, through
``torch.compiler.config.cache_key_tag``, everything else nkipy's result depends on: nkipy's and
the plugins' versions and sources, the lowering rules (their fingerprints: code and package
sources, as the kernel cache's keys hold them), the decomposition table, the runtime and its
target, the nkipy configuration, and the CPU-region annotations of the dynamo graph (node
metadata that torch's key does not see). A hit is not planned again, so whatever decides the plan
and the graph passes must be in the key. It also asks torch to bundle the result in the entry
(``bundled_autograd_cache``; the default entry refers to inductor's FX graph cache).

Training graphs are not in this cache: torch compiles a backward lazily, at the first
``backward()``, after the compile that would write the entry, and compiling it up front would
make every model called with gradients enabled but never differentiated compile a backward it
does not use (a neuronx-cc compile on Trainium). A training graph's warm start skips lowering
through nkipy's kernel cache and re-runs AOTAutograd's trace.

What is not safely serialisable bypasses the cache: a graph with symbolic sizes (specialised per
size set at call time, or sized by tensor values), a graph whose nodes cannot be pickled, and a
dynamo graph torch cannot key (torch decides). torch's hit, miss, save and bypass counts for
nkipy's compiles are mirrored into ``cache_stats()`` as ``aot_cache_hits``, ``aot_cache_misses``,
``aot_cache_saved`` and ``aot_cache_bypasses``; why nkipy bypassed is logged at INFO by
``nkipy.aot_cache``. torch's own switches turn the cache off for every backend
(``TORCHINDUCTOR_AUTOGRAD_CACHE=0``, ``torch.compiler.config.force_disable_caches``).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_symbols

from nkipy_core import _torch
from nkipy_core.cache import keys
from nkipy_core.cache.kernel_cache import STATS, KernelCache
from nkipy_core.compiler.kernel_call import entry
from nkipy_core.compiler.key_parts import runtime_tag, versions_key
from nkipy_core.compiler.pipeline import compile_graph
from nkipy_core.config.settings import Config, select_runtime
from nkipy_core.dynamo import stored_graph
from nkipy_core.plugin import manager as plugins
from nkipy_core.plugin.registry import op_name, source_digest

log = logging.getLogger("nkipy.aot_cache")

#: node metadata a graph keeps in the cache: what ``compile_graph`` and the packs' graph passes
#: read (the fake value, the CPU-region annotation); the rest (stack traces, module stacks)
#: describes the user's source and often cannot be pickled
_KEPT_META = frozenset({"val", "custom"})

#: torch's AOTAutograd cache counters and the names nkipy's ``cache_stats`` gives them
_COUNTERS = {
    "autograd_cache_hit": "aot_cache_hits",
    "autograd_cache_miss": "aot_cache_misses",
    "autograd_cache_saved": "aot_cache_saved",
    "autograd_cache_bypass": "aot_cache_bypasses",
}

#: the graphs AOTAutograd compiled or restored inside ``caching``, for the backend to call
_GRAPHS: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "nkipy_aot_graphs", default=None
)


class NkipyGraph(_torch.OutputCode):
    """A compiled forward, backward or inference graph, as torch's AOTAutograd cache stores it.

    Called with AOTAutograd's boxed convention (one list of arguments). In a cache entry it is
    the compiled graph (``stored_graph``), the pickled ATen graph and the configuration;
    ``post_compile`` makes the callable again on a hit.

    ``why_wrapped`` says why dynamo must call it through AOTAutograd's runtime wrapper
    (``nkipy_core.dynamo.direct_call``; ``None``: it need not), ``num_inputs`` how many inputs it
    takes, ``mutated`` which of them it writes for autograd to see (``mutated_inputs``)."""

    def __init__(
        self,
        compiled: Callable[..., Any],
        config: Config,
        graph: bytes | None,
        bypass: str | None,
        fused: torch.fx.GraphModule | None = None,
        *,
        why_wrapped: str | None,
        num_inputs: int = 0,
        mutated: tuple[int, ...] = (),
    ):
        """``graph``: ``dumps`` of the graph ``compiled`` was compiled from; ``bypass``: why the
        graph stays out of the cache (``None``: it goes in); ``fused``: the graph
        ``compile_graph`` returned, if ``compiled`` runs it."""
        super().__init__()
        self.why_wrapped = why_wrapped
        self.num_inputs = num_inputs
        self.mutated = mutated
        self._boxed_call = True
        self.compiled: Callable[..., Any] | None = compiled
        self.config = config
        self.graph = graph
        self.bypass = bypass
        self.fused = fused
        #: ``stored_graph.dumps`` of ``fused``, made for the cache entry
        self.stored: bytes | None = None
        _made(self)

    def __call__(self, inputs: Sequence[Any]) -> Any:
        assert self.compiled is not None, "only the copy torch pickles drops its callable"
        return self.compiled(*inputs)

    def prepare_for_serialization(self) -> None:
        """Called by torch on a copy of this object before it pickles the cache entry."""
        if self.bypass is not None:
            log.info(
                "nkipy: not caching a compiled graph in torch's AOTAutograd cache: %s", self.bypass
            )
            raise _torch.BypassAOTAutogradCache(f"nkipy: {self.bypass}")
        if self.fused is not None and not self.config.precompile:
            self.stored, why = stored_graph.dumps(self.fused)
            if why is not None:
                log.info(
                    "nkipy: a hit in torch's AOTAutograd cache will compile this graph again: %s",
                    why,
                )
        self.compiled = self.fused = None

    def post_compile(
        self, example_inputs: Sequence[Any], constants: Any, graph_kwargs: Any
    ) -> None:
        """Called by torch on a cache hit: rebuild the compiled graph from nkipy's kernel cache,
        or compile the ATen graph again when that cannot be done."""
        _made(self)
        if self.compiled is not None:
            return
        gm = stored_graph.loads(self.stored, self.config) if self.stored is not None else None
        if gm is not None:
            STATS["aot_cache_restored"] += 1
            self.compiled = entry(gm)
            return
        STATS["aot_cache_recompiled"] += 1
        fake_mode = _torch.detect_fake_mode(example_inputs) or _torch.FakeTensorMode()
        gm = _torch.GraphPickler.loads(self.graph, fake_mode)
        gm.recompile()
        inputs = [n.meta.get("val") for n in gm.graph.find_nodes(op="placeholder")]
        with fake_mode:  # as AOTAutograd runs its compilers: tensors the passes make are fake too
            self.compiled = entry(compile_graph(gm, inputs, self.config))

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        """No Triton kernels here (torch's interface asks every ``OutputCode`` for it)."""


def dumps(gm: torch.fx.GraphModule) -> tuple[bytes | None, str | None]:
    """``gm`` pickled for a cache entry, or why it cannot be; call it before ``compile_graph``
    rewrites the graph. Graphs with symbolic sizes stay out: they are specialised per size set
    of the calls (``nkipy_core.dynamo.specialize``), or hold sizes that depend on tensor values."""
    if any(free_symbols(n.meta.get("val")) for n in gm.graph.nodes):
        return None, "its sizes are symbolic"
    try:
        return _torch.GraphPickler.dumps(
            gm,
            _torch.GraphPicklerOptions(
                ops_filter=None, node_metadata_key_filter=_KEPT_META.__contains__
            ),
        ), None
    except Exception as exc:  # noqa: BLE001 - any pickling failure only costs the warm start
        return None, f"its graph cannot be pickled ({type(exc).__name__}: {exc})"


def _made(graph: NkipyGraph) -> None:
    graphs = _GRAPHS.get()
    if graphs is not None and not any(g is graph for g in graphs):
        graphs.append(graph)


@contextlib.contextmanager
def caching(
    gm: torch.fx.GraphModule,
    config: Config,
    decompositions: dict[Any, Callable[..., Any]],
) -> Iterator[list[NkipyGraph]]:
    """Compile ``gm`` with AOTAutograd inside this context: keys, bundling and counters as the
    module docstring says. Yields the list of the ``NkipyGraph`` objects AOTAutograd compiles or
    restores meanwhile."""
    tag = torch.compiler.config.cache_key_tag
    key = cache_key(gm, config, decompositions)
    before = {name: _torch.dynamo_counters["aot_autograd"][name] for name in _COUNTERS}
    graphs: list[NkipyGraph] = []
    token = _GRAPHS.set(graphs)
    try:
        with (
            _torch.functorch_config.patch(bundled_autograd_cache=True),
            torch.compiler.config.patch(  # type: ignore[attr-defined]  # set up when torch imports it
                cache_key_tag=f"{tag}|nkipy:{key}" if tag else f"nkipy:{key}"
            ),
        ):
            yield graphs
    finally:
        _GRAPHS.reset(token)
        for name, ours in _COUNTERS.items():
            count = _torch.dynamo_counters["aot_autograd"][name] - before[name]
            if count:
                STATS[ours] += count


def cache_key(
    gm: torch.fx.GraphModule, config: Config, decompositions: dict[Any, Callable[..., Any]]
) -> str:
    """What nkipy adds to torch's AOTAutograd cache key for dynamo graph ``gm`` (see the module
    docstring): what the compiled graphs depend on beyond the graph's code and inputs."""
    runtime = select_runtime(config)
    options = config.compile_options()
    settings = attrs.asdict(config, recurse=False)
    settings.pop("log_level")
    settings.pop("memory_limit")  # what the device may hold, not what a graph compiles to
    settings["nkipy_cache"] = KernelCache(config.nkipy_cache).root
    loaded = plugins.get(strict=config.strict)
    added = loaded.decompositions.added
    table = sorted(
        f"{name}={keys.function_fingerprint(fn) if name in added else ''}"
        for name, fn in ((op_name(op), fn) for op, fn in decompositions.items())
    )
    # what a hit's graph was planned and lowered with: it is not planned again (``stored_graph``)
    rules = sorted(r.fingerprint for r in loaded.lowerings.all_rules())
    sources = sorted(f"{s.name}:{source_digest(s.module)}" for s in loaded.statuses if s.ok)
    regions = [
        f"{n.name}:{sorted(n.meta['custom'].items())}"
        for n in gm.graph.nodes
        if n.meta.get("custom")
    ]
    return keys.aot_key(
        versions_key(),
        runtime.name,
        runtime_tag(runtime, options),
        repr(sorted(settings.items())),
        table,
        rules,
        sources,
        regions,
    )
