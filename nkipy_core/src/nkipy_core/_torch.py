"""The one door to torch's private API: every ``torch._*`` name nkipy uses is reached from here.

torch changes its private modules between releases without notice. Keeping every use behind
this module means a torch upgrade breaks one file, and ``tests/core/test_torch_door.py`` names
the symbol that moved (one canary per name below). Public torch API (``torch.library``,
``torch.fx``, ``torch.distributed``, ``torch.compiler``) is used directly everywhere else.

Importing this module checks that the installed torch is one nkipy-core supports (the range in
its package metadata) and raises ``UnsupportedTorchError`` otherwise, before any private name is
touched. The device registers inside ``import torch``, so the names bound at import are only
those of modules torch has loaded by then; the others (dynamo, AOTAutograd, inductor, OpInfo)
are imported on first use (``_LAZY``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import linecache
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch

from nkipy_core.errors import UnsupportedTorchError

#: the torch requirement of nkipy-core when its package metadata cannot be read (a source tree)
DEFAULT_TORCH_REQUIREMENT = "torch>=2.13,<2.14"
#: a requirement on torch with versions and without an environment marker: its specifiers
_TORCH_REQUIREMENT = re.compile(r"\s*torch\s*\(?\s*([<>=!~][^;()]*?)\)?\s*")


def supported_torch() -> str:
    """The torch versions nkipy-core works with, as its package metadata declares them."""
    try:
        requires = importlib.metadata.requires("nkipy-core") or []
    except importlib.metadata.PackageNotFoundError:
        requires = []
    # parsed by hand: packaging.requirements costs ~0.1 s, inside every `import torch`
    found = (_TORCH_REQUIREMENT.fullmatch(line) for line in [*requires, DEFAULT_TORCH_REQUIREMENT])
    specifiers = next(m for m in found if m is not None).group(1).replace(" ", "").split(",")
    return ",".join(sorted(specifiers, key=lambda s: s[0] != ">"))  # lower bound first


def check_torch(installed: str | None = None) -> None:
    """Raise ``UnsupportedTorchError`` if ``installed`` (default: this torch) is not supported."""
    installed = installed or str(torch.__version__)
    supported = supported_torch()
    try:
        ok = _satisfies(installed, supported)
    except ValueError:  # not a PEP 440 version (packaging's InvalidVersion)
        ok = False
    if not ok:
        raise UnsupportedTorchError(
            f"nkipy-core works with torch {supported}, and this environment has torch "
            f"{installed}: nkipy relies on torch internals that change between releases. "
            f"Install a supported torch (pip install 'torch{supported}') or an nkipy-core "
            "release made for this torch."
        )


def _satisfies(installed: str, specifiers: str) -> bool:
    """Whether ``installed`` meets every comparison in ``specifiers`` (``">=2.13,<2.14"``), by
    PEP 440 as ``packaging`` decides it: ``<2.14`` excludes ``2.14.0a0`` (a nightly of 2.14).

    Plain comparisons are evaluated over the copy of ``packaging.version`` torch has already
    imported, so the check adds nothing to ``import torch``; ``packaging``'s specifier module
    (about 10 ms to import) is loaded only for another form (``~=``, ``==2.13.*``)."""
    from torch._vendor.packaging.version import Version  # loaded by ``import torch`` already

    version = Version(installed)
    for specifier in specifiers.split(","):
        match = re.fullmatch(r"(>=|<=|==|!=|>|<)([0-9][0-9a-z.+]*)", specifier)
        if match is None:
            from packaging.specifiers import SpecifierSet

            return SpecifierSet(specifiers).contains(installed, prereleases=True)
        op, bound = match.group(1), Version(match.group(2))
        same_release = Version(version.base_version) == Version(bound.base_version)
        # a bound without a local label ignores the installed one (``2.13.0+cpu``) where PEP 440 does
        public = version if bound.local else Version(version.public)
        ok = {
            ">=": public >= bound,
            "<=": public <= bound,
            "==": public == bound,
            "!=": public != bound,
            # PEP 440: ``<V`` admits no pre-release of V, ``>V`` no post-release or local of V
            "<": version < bound and not (version.is_prerelease and same_release),
            ">": version > bound
            and not ((version.is_postrelease or version.local) and same_release),
        }[op]
        if not ok:
            return False
    return True


check_torch()

# -- the dispatcher and its operator objects ------------------------------------------------------

#: an ATen or custom op with one overload: what FX nodes target and lowering rules are keyed by
OpOverload = torch._ops.OpOverload
#: all overloads of one op (``torch.ops.aten.add``): resolved to one before lowering
OpOverloadPacket = torch._ops.OpOverloadPacket
#: the base of every operator object (higher-order ops too): refused by the graph pickler
OperatorBase = torch._ops.OperatorBase
#: a dispatch key, and sets of them: to redispatch below the device's key
DispatchKey = torch._C.DispatchKey
DispatchKeySet = torch._C.DispatchKeySet
#: runs the autocast kernels' casts below the autocast key
ExcludeDispatchKeyGuard = torch._C._ExcludeDispatchKeyGuard
#: replays graphs whose ops are final (autocast already applied) without autocast
DisableAutocast = torch._C._DisableAutocast
#: the qualified name of every registered op: ``nkipy-ops list --coverage``
all_op_names = torch._C._dispatch_get_all_op_names
#: whether any autocast is on: then dynamo calls a graph through AOTAutograd's wrapper
is_any_autocast_enabled = torch._C._is_any_autocast_enabled


def schema(op: Any) -> torch.FunctionSchema:
    """An op's ``FunctionSchema`` (name, arguments, mutability): torch has no public accessor."""
    return op._schema


def overload_name(op: Any) -> str:
    """An op's overload name (``"Tensor"`` of ``aten::add.Tensor``, ``"default"``)."""
    return op._overloadname


def dispatcher_handle(op: Any) -> Any:
    """An op's dispatcher handle: ``redispatch_boxed`` through it skips ``OpOverload``'s
    per-call Python work on the device's hottest paths."""
    return op._handle


# -- the PrivateUse1 device -----------------------------------------------------------------------

#: the name PrivateUse1 is registered under (``"privateuseone"`` until a backend renames it)
privateuse1_backend_name = torch._C._get_privateuse1_backend_name
#: the backend hooks (``is_available``...) and device guard a Python backend subclasses
PrivateUse1Hooks = torch._C._acc.PrivateUse1Hooks
DeviceGuard = torch._C._acc.DeviceGuard
#: registers them with torch's C++ side
register_privateuse1_hooks = torch._C._acc.register_python_privateuseone_hook
register_privateuse1_device_guard = torch._C._acc.register_python_privateuseone_device_guard
#: the C++ device type a device guard reports
PRIVATEUSE1 = torch._C._autograd.DeviceType.PrivateUse1
#: makes the device module ``torch.nkipy``
register_device_module = torch._register_device_module
#: an empty PrivateUse1 tensor with no storage yet: device tensors are set on runtime buffers
create_empty_tensor = torch._C._acc.create_empty_tensor
#: a storage over a data pointer without an allocator: a runtime buffer's stand-in for torch
storage_from_data_pointer: Callable[[int, torch.device, int], torch.UntypedStorage] = (
    torch._C._construct_storage_from_data_pointer  # type: ignore[assignment]  # the stub says Storage: it makes an UntypedStorage
)


def swap_storage_memory(a: torch.UntypedStorage, b: torch.UntypedStorage) -> None:
    """Swap two storages' memory in place (data pointer, size, allocator): every tensor on
    either sees the other's. Torch allows it between storages of one device when their sizes
    match or one is empty; it is how a device registered from Python resizes a storage, since
    torch's ``resize_`` asks C++ hooks such a device cannot give."""
    a._swap_data_ptr_(b)  # type: ignore[attr-defined]  # not in torch's stubs


#: a view with the negative bit flipped, as ``x.conj().imag`` is one (no public function makes
#: one): a fake stand-in for such a graph input carries the bit as the input does
neg_view: Callable[[torch.Tensor], torch.Tensor] = torch._neg_view


def untraced(fn: Any) -> Any:
    """Keep dynamo out of ``fn``, as it keeps out of ``torch.cuda``: a compiled function that
    calls it breaks the graph and calls it as is (``torch.compiler.disable``'s mark, without
    importing dynamo), and dynamo neither traces its frame nor anything it calls. Only ``fn``'s
    own code object is marked: torch's and other programs' code is left alone."""
    eval_frame = torch._C._dynamo.eval_frame
    skip = eval_frame._FrameAction.SKIP
    eval_frame.set_code_exec_strategy(fn.__code__, eval_frame._FrameExecStrategy(skip, skip))
    fn._torchdynamo_disable = True
    return fn


# -- pytrees, fake tensors, tracing context (modules loaded by ``import torch``) -----------------

#: torch's core ATen decomposition table: the base of the backend's decompositions
from torch._decomp import core_aten_decompositions  # noqa: E402
from torch._guards import CompileContext, TracingContext, detect_fake_mode  # noqa: E402
from torch._subclasses.fake_tensor import (  # noqa: E402
    FakeTensor,
    FakeTensorMode,
    unset_fake_temporarily,
)
from torch.utils._python_dispatch import is_traceable_wrapper_subclass  # noqa: E402
from torch.utils._pytree import tree_leaves, tree_map  # noqa: E402


def profiler_enabled() -> bool:
    """Whether torch's profiler is recording: kernel timings then become profiler events."""
    return torch.autograd.profiler._is_profiler_enabled


def graph_codegen(graph: torch.fx.Graph) -> Any:
    """A graph's code generator: the stored-graph format holds only graphs with torch's own."""
    return graph._codegen


def generated_forward(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    """``gm``'s generated ``forward``, bound. A graph module AOTAutograd makes recompiles lazily:
    until its first call its ``forward`` is a stub that generates the code, then calls the
    module (``nn.Module.__call__``, hooks and all), and a stub taken before that call stays one."""
    from torch.fx._lazy_graph_module import _LazyGraphModule

    _LazyGraphModule.force_recompile(gm)
    return gm.forward


def forget_graph_source(gm: torch.fx.GraphModule) -> None:
    """Drop what ``torch.fx`` keeps of ``gm``'s generated ``forward`` source for tracebacks: an
    entry in its loader's cache and one in ``linecache``, made for every module and never freed.
    The eager device makes a module per new call signature, so a loop over ever new shapes would
    grow them without bound; ``gm`` keeps its ``code`` and still runs."""
    from torch.fx import graph_module

    key = type(gm).forward.__code__.co_filename
    graph_module._loader.eval_cache.pop(key, None)
    linecache.cache.pop(key, None)


def module_stack(node: torch.fx.Node) -> list[tuple[str, Any]] | None:
    """The modules a node of an AOTAutograd graph was traced inside, outermost first, as
    (path, class) pairs: dynamo's ``nn_module_stack``, or, on a backward node, the copy
    AOTAutograd made of its forward node's (``fwd_nn_module_stack``). ``None`` when the node
    carries neither (graph inputs, and the backward's gradient accumulations, which AOTAutograd
    leaves untagged); an empty list for an op of the top-level module."""
    stack = node.meta.get("nn_module_stack", node.meta.get("fwd_nn_module_stack"))
    return None if stack is None else list(stack.values())


# -- torch.distributed ----------------------------------------------------------------------------


def resolve_process_group(group_name: str) -> Any:
    """The process group a functional collective's ``group_name`` names."""
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(group_name)  # type: ignore[arg-type]  # GroupName is a NewType of str


def allgather_base(group: Any, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:  # noqa: A002
    """A gloo group's ``all_gather_into_tensor`` (no public method of the group does it); the
    group's default options without ``opts`` (``AllgatherOptions`` is not public either)."""
    if opts is None:
        return group._allgather_base(output, input)
    return group._allgather_base(output, input, opts)


def reduce_scatter_base(group: Any, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:  # noqa: A002
    """A gloo group's ``reduce_scatter_tensor`` (no public method of the group does it)."""
    return group._reduce_scatter_base(output, input, opts)


# -- imported on first use: dynamo, AOTAutograd, inductor, OpInfo ---------------------------------

#: name -> (module, attribute; None: the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    # how the backend hands dynamo graphs to AOTAutograd with its own compilers
    "aot_autograd": ("torch._dynamo.backends.common", "aot_autograd"),
    # compilers whose results torch's AOTAutograd cache may store
    "SerializableAOTDispatchCompiler": (
        "torch._functorch.aot_autograd",
        "SerializableAOTDispatchCompiler",
    ),
    # torch's AOTAutograd cache hit/miss/save/bypass counts, mirrored in ``cache_stats()``
    "dynamo_counters": ("torch._dynamo.utils", "counters"),
    # raised to keep a graph out of torch's AOTAutograd cache
    "BypassAOTAutogradCache": (
        "torch._functorch._aot_autograd.autograd_cache",
        "BypassAOTAutogradCache",
    ),
    # the base of what the AOTAutograd cache stores (``NkipyGraph``)
    "OutputCode": ("torch._inductor.output_code", "OutputCode"),
    # pickles FX graphs with fake values for the AOTAutograd cache
    "GraphPickler": ("torch.fx._graph_pickler", "GraphPickler"),
    "GraphPicklerOptions": ("torch.fx._graph_pickler", "Options"),
    # ``bundled_autograd_cache``: the cache entry holds nkipy's result itself
    "functorch_config": ("torch._functorch.config", None),
    # AOTAutograd's metadata of a graph: whether dynamo may call it without the runtime wrapper
    "OutputType": ("torch._functorch._aot_autograd.schemas", "OutputType"),
    "MutationType": ("torch._functorch._aot_autograd.schemas", "MutationType"),
    "PlainTensorMeta": ("torch._functorch._aot_autograd.schemas", "PlainTensorMeta"),
    "ViewAndMutationMeta": ("torch._functorch._aot_autograd.schemas", "ViewAndMutationMeta"),
    # marks outputs' symbolic dimensions, as AOTAutograd's runtime wrapper does
    "mark_dynamo_propagated_dynamic_indices": (
        "torch._functorch._aot_autograd.runtime_wrappers",
        "mark_dynamo_propagated_dynamic_indices",
    ),
    # the frames dynamo resumes a function in after a graph break, mapped to that function:
    # their compiles count as the function's (``observe/recompiles.py``)
    "ContinueExecutionCache": ("torch._dynamo.resume_execution", "ContinueExecutionCache"),
    # what torch.compile raises when a backend fails: the test harness reports it
    "BackendCompilerFailed": ("torch._dynamo.exc", "BackendCompilerFailed"),
    # TorchInductor's compile of an ATen graph outside dynamo and AOTAutograd, as AOTAutograd's
    # inference path compiles a forward graph (its graph rewrites, its outputs in the strides
    # traced), with the settings that path makes for a graph, and the decompositions it expects
    # its graphs traced with: the ``inductor`` runtime's kernels
    "compile_fx_forward": ("torch._inductor.compile_fx", "compile_fx_forward"),
    "create_compiler_config_extra": ("torch._inductor.compile_fx", "create_compiler_config_extra"),
    "inductor_decompositions": ("torch._inductor.decomposition", "select_decomp_table"),
    # a value TorchInductor computes once, into memory of these strides, rather than inlining its
    # computation into every loop that reads it (the ``inductor`` runtime's one-row products)
    "force_stride_order": ("torch._inductor.inductor_prims", "force_stride_order"),
    # the torch dispatch modes around a call set aside (AOTAutograd's runtime wrapper may have one
    # active at a graph's first call): a kernel compiled there must not be traced by them
    "disable_current_modes": ("torch.utils._python_dispatch", "_disable_current_modes"),
    # PyTorch's OpInfo database: the conformance harness's cases
    "common_methods_invocations": ("torch.testing._internal.common_methods_invocations", None),
}


@contextlib.contextmanager
def opinfo_samples_untracked() -> Iterator[None]:
    """OpInfo samples drawn without torch's search for the running ``unittest`` test.

    Each ``OpInfo.sample_inputs`` call walks ``inspect.stack()`` twice, reading the source line of
    every frame, to find a ``unittest.TestCase`` whose name seeds the samples. The harness never
    runs inside one, so the search finds nothing (the samples use torch's fixed seed either way),
    yet under dynamo's deep stacks it took a fifth of an OpInfo sweep."""
    modules = [
        importlib.import_module("torch.testing._internal.common_utils"),
        importlib.import_module("torch.testing._internal.opinfo.core"),  # imported the name
    ]
    name = "extract_test_fn"
    saved = [getattr(module, name) for module in modules]
    for module in modules:
        setattr(module, name, lambda: None)
    try:
        yield
    finally:
        for module, fn in zip(modules, saved):
            setattr(module, name, fn)


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # dynamo first: some of AOTAutograd's modules cannot be imported before it
    importlib.import_module("torch._dynamo")
    module = importlib.import_module(where[0])
    value = module if where[1] is None else getattr(module, where[1])
    globals()[name] = value
    return value


#: every name of the door (``tests/core/test_torch_door.py`` has a canary for each)
__all__ = [
    "opinfo_samples_untracked",
    "CompileContext",
    "DeviceGuard",
    "DisableAutocast",
    "DispatchKey",
    "DispatchKeySet",
    "ExcludeDispatchKeyGuard",
    "FakeTensor",
    "FakeTensorMode",
    "OpOverload",
    "OpOverloadPacket",
    "OperatorBase",
    "PRIVATEUSE1",
    "PrivateUse1Hooks",
    "TracingContext",
    "all_op_names",
    "allgather_base",
    "core_aten_decompositions",
    "create_empty_tensor",
    "detect_fake_mode",
    "dispatcher_handle",
    "forget_graph_source",
    "generated_forward",
    "graph_codegen",
    "module_stack",
    "is_any_autocast_enabled",
    "is_traceable_wrapper_subclass",
    "neg_view",
    "overload_name",
    "privateuse1_backend_name",
    "profiler_enabled",
    "reduce_scatter_base",
    "register_device_module",
    "register_privateuse1_device_guard",
    "register_privateuse1_hooks",
    "resolve_process_group",
    "schema",
    "storage_from_data_pointer",
    "swap_storage_memory",
    "tree_leaves",
    "tree_map",
    "unset_fake_temporarily",
    "untraced",
    *_LAZY,
]
