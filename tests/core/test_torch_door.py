"""torch's private API is reached through ``nkipy_core._torch`` only, and each name it gives still
means what nkipy relies on.

One canary per door name: after a torch upgrade, a failure names the symbol and the torch
version, so the fix starts in ``_torch.py`` and nowhere else. A source scan keeps private torch
use from creeping back into nkipy-core or the packs. The supported torch range is checked when
the door is imported, and the device's registration inside ``import torch`` never raises for it.
"""

from __future__ import annotations

import ast
import copy
import inspect
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from fresh_python import python
from repo_sources import ROOT, SOURCES

from nkipy_core import UnsupportedTorchError, _torch

DOOR = ROOT / "nkipy_core/src/nkipy_core/_torch.py"
ADD = torch.ops.aten.add.Tensor


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def _lazy_modules_forward_is_their_code() -> bool:
    """A graph module AOTAutograd makes generates its code at its first call, through a stub
    that calls the module; the door's forward is the generated code itself."""
    from torch.fx._lazy_graph_module import _LazyGraphModule

    graph = torch.fx.Graph()
    graph.output(graph.call_function(ADD, (graph.placeholder("x"), 1)))
    gm = _LazyGraphModule(torch.nn.Module(), graph)
    stub = gm.forward
    forward = _torch.generated_forward(gm)
    return (
        stub.__func__ is _LazyGraphModule._lazy_forward
        and forward.__func__ is not _LazyGraphModule._lazy_forward
        and torch.equal(forward(torch.ones(1)), torch.full((1,), 2.0))
    )


def _graph_source_is_forgotten() -> bool:
    """A GraphModule's source is in torch.fx's loader and in linecache, and leaves both."""
    import linecache

    from torch.fx import graph_module

    graph = torch.fx.Graph()  # made as the eager device makes its one-op modules
    graph.output(graph.call_function(ADD, (graph.placeholder("x"), 1)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    key = type(gm).forward.__code__.co_filename
    before = key in graph_module._loader.eval_cache and key in linecache.cache
    _torch.forget_graph_source(gm)
    after = key in graph_module._loader.eval_cache or key in linecache.cache
    return before and not after and torch.equal(gm(torch.ones(1)), torch.full((1,), 2.0))


def _opinfo_samples_skip_the_stack_walk() -> bool:
    """The same samples come out, and ``inspect.stack`` is walked only outside the context."""
    import unittest.mock

    opinfo = next(o for o in _torch.common_methods_invocations.op_db if o.name == "add")

    def first_sample():
        torch.manual_seed(0)
        return next(iter(opinfo.sample_inputs("cpu", torch.float32))).input

    with unittest.mock.patch("inspect.stack", side_effect=inspect.stack) as walked:
        tracked = first_sample()
        walks_outside = walked.call_count
        with _torch.opinfo_samples_untracked():
            untracked = first_sample()
    return (
        walks_outside > 0 and walked.call_count == walks_outside and torch.equal(tracked, untracked)
    )


def _resume_code_knows_its_function() -> bool:
    """The code dynamo resumes a function in after a graph break maps to the function's code."""
    seen = []

    def backend(gm, inputs):
        seen.append(_torch.TracingContext.get_traced_code()[0])
        return gm

    def broken(x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2

    torch.compiler.reset()
    torch.compile(broken, backend=backend)(torch.ones(2))
    first, resumed = seen
    metadata = _torch.ContinueExecutionCache.generated_code_metadata
    return first is broken.__code__ and metadata.get(resumed).code is broken.__code__


def _module_stacks_reach_backward_nodes() -> bool:
    """Forward nodes name the module they ran in, backward nodes their forward node's module,
    and gradient accumulations carry no stack (``compiler.blocks`` infers theirs)."""

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(3, 3) for _ in range(2))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x) + x
            return x.sum()

    graphs = []

    def keep(gm, _):
        graphs.append(gm)
        return gm

    torch.compiler.reset()
    compiled = torch.compile(Two(), backend=_torch.aot_autograd(fw_compiler=keep, bw_compiler=keep))
    compiled(torch.ones(2, 3, requires_grad=True)).backward()
    paths = [
        {path for path, _ in _torch.module_stack(n) or []}
        for g in graphs
        for n in g.graph.find_nodes(op="call_function", target=torch.ops.aten.mm.default)
    ]
    accumulations = [
        n
        for n in graphs[1].graph.nodes
        if n.op == "call_function" and _torch.module_stack(n) is None
    ]
    return (
        len(graphs) == 2
        and all(any(p.endswith(("layers.0", "layers.1")) for p in s) for s in paths)
        and bool(accumulations)
    )


def _untraced_is_honoured() -> None:
    """Dynamo breaks the graph at an untraced function and calls it as is (not compiling)."""
    seen = []

    @_torch.untraced
    def probe(x):
        seen.append(torch.compiler.is_compiling())
        return x

    torch.compiler.reset()
    torch.compile(lambda x: probe(x + 1) * 2, backend="eager")(torch.ones(2))
    assert seen == [False], seen


def _storages_swap_memory() -> bool:
    """Two storages trade data pointer and size, one of them empty, and a tensor on either sees
    the other's memory."""
    full = torch.UntypedStorage(8)
    empty = torch.UntypedStorage(0)
    t = torch.empty(0, dtype=torch.uint8).set_(full)
    pointer = full.data_ptr()
    _torch.swap_storage_memory(full, empty)
    return (full.nbytes(), empty.nbytes(), empty.data_ptr()) == (0, 8, pointer) and (
        t.untyped_storage().nbytes() == 0
    )


def _gloo_methods() -> None:
    """A one-rank gloo group gathers and reduce-scatters into flat tensors (options optional
    for the gather, as the nkipy group calls it)."""
    from datetime import timedelta

    group = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, timedelta(seconds=10))
    out = torch.zeros(3)
    _torch.allgather_base(group, out, torch.arange(3.0)).wait()
    assert out.tolist() == [0.0, 1.0, 2.0]
    _torch.reduce_scatter_base(group, out, torch.ones(3), dist.ReduceScatterOptions()).wait()
    assert out.tolist() == [1.0, 1.0, 1.0]


#: door name -> a check that raises (or returns False) when torch no longer gives nkipy that
class _Seen(torch.utils._python_dispatch.TorchDispatchMode):
    """A dispatch mode that records the ops it sees."""

    def __init__(self):
        super().__init__()
        self.ops: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def _a_forward_graph_compiles_to_a_boxed_call():
    """A graph traced with the decompositions, writing an input with ``copy_``, compiles to a
    callable taking its inputs as one list (which it empties) and returning its outputs in the
    strides they were traced with (a transposed product's result is not its transposed
    memory)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def step(x, y):
        y.copy_(y + x[0])
        return ((x @ x).t().contiguous(),)

    x, y = torch.arange(16.0).reshape(4, 4), torch.ones(4)
    gm = make_fx(step, decomposition_table=_torch.inductor_decompositions(), tracing_mode="fake")(
        x, y
    )
    compiled = _torch.compile_fx_forward(
        gm,
        [x, y],
        num_orig_model_outputs=1,
        num_example_inputs=2,
        compiler_config_extra=_torch.create_compiler_config_extra(gm),
        is_inference=True,
    )
    inputs = [x, y]
    (out,) = compiled(inputs)
    return (
        inputs == []
        and torch.equal(out, (x @ x).t())
        and out.is_contiguous()
        and torch.equal(y, x[0] + 1)
    )


def _a_forced_stride_order_is_realized() -> bool:
    """Eager: the tensor in the strides asked for; TorchInductor lowers it to a buffer of them."""
    from torch._inductor.lowering import lowerings

    x = torch.arange(12.0).reshape(3, 4).t()
    forced = _torch.force_stride_order(x, (3, 1))
    return (
        forced.stride() == (3, 1)
        and torch.equal(forced, x)
        and _torch.force_stride_order in lowerings
    )


def _modes_set_aside() -> bool:
    """Inside ``disable_current_modes`` an active dispatch mode sees nothing; outside it, it does."""
    x = torch.ones(2)
    with _Seen() as seen:
        with _torch.disable_current_modes():
            torch.add(x, x)
        hidden = not seen.ops
        torch.add(x, x)
    return hidden and bool(seen.ops)


CANARIES = {
    "OpOverload": lambda: isinstance(ADD, _torch.OpOverload),
    "OpOverloadPacket": lambda: isinstance(torch.ops.aten.add, _torch.OpOverloadPacket),
    "OperatorBase": lambda: issubclass(_torch.OpOverload, _torch.OperatorBase),
    "DispatchKey": lambda: (
        {"CPU", "PrivateUse1", "AutocastPrivateUse1"} <= set(_torch.DispatchKey.__members__)
    ),
    "DispatchKeySet": lambda: _torch.DispatchKeySet(_torch.DispatchKey.CPU).has(
        _torch.DispatchKey.CPU
    ),
    "ExcludeDispatchKeyGuard": lambda: (
        _torch.ExcludeDispatchKeyGuard(
            _torch.DispatchKeySet(_torch.DispatchKey.AutocastPrivateUse1)
        ).__enter__
        is not None
    ),
    "DisableAutocast": lambda: _torch.DisableAutocast().__enter__ is not None,
    "all_op_names": lambda: "aten::add.Tensor" in _torch.all_op_names(),
    "is_any_autocast_enabled": lambda: _torch.is_any_autocast_enabled() is False,
    "schema": lambda: (
        _torch.schema(ADD).name == "aten::add"
        and not _torch.schema(ADD).is_mutable
        and [a.name for a in _torch.schema(ADD).arguments] == ["self", "other", "alpha"]
    ),
    "overload_name": lambda: _torch.overload_name(ADD) == "Tensor",
    "dispatcher_handle": lambda: callable(_torch.dispatcher_handle(ADD).redispatch_boxed),
    "privateuse1_backend_name": lambda: _torch.privateuse1_backend_name() == "nkipy",
    "PrivateUse1Hooks": lambda: (
        {"is_available", "has_primary_context", "is_built"} <= set(dir(_torch.PrivateUse1Hooks))
    ),
    "DeviceGuard": lambda: "type_" in dir(_torch.DeviceGuard),
    "register_privateuse1_hooks": lambda: callable(_torch.register_privateuse1_hooks),
    "register_privateuse1_device_guard": lambda: callable(_torch.register_privateuse1_device_guard),
    "PRIVATEUSE1": lambda: _torch.PRIVATEUSE1.name.lower() == _torch.privateuse1_backend_name(),
    "register_device_module": lambda: (
        _params(_torch.register_device_module) == ["device_type", "module"]
    ),
    "create_empty_tensor": lambda: (
        _torch.create_empty_tensor([0], torch.float32).device.type == "nkipy"
    ),
    "neg_view": lambda: (
        _torch.neg_view(torch.ones(1)).is_neg() and not _torch.neg_view(torch.ones(1)).is_conj()
    ),
    "storage_from_data_pointer": lambda: (
        _torch.storage_from_data_pointer(1 << 40, torch.device("nkipy", 0), 64).nbytes() == 64
    ),
    "swap_storage_memory": _storages_swap_memory,
    "untraced": _untraced_is_honoured,
    "CompileContext": lambda: callable(_torch.CompileContext.current_compile_id),
    "TracingContext": lambda: (
        _torch.TracingContext.try_get() is None and callable(_torch.TracingContext.get_traced_code)
    ),
    "detect_fake_mode": lambda: _torch.detect_fake_mode([torch.ones(1)]) is None,
    "FakeTensor": lambda: isinstance(
        _torch.FakeTensorMode().from_tensor(torch.ones(1)), _torch.FakeTensor
    ),
    "FakeTensorMode": lambda: _torch.FakeTensorMode().from_tensor(torch.ones(2)).shape == (2,),
    "unset_fake_temporarily": lambda: _torch.unset_fake_temporarily().__enter__ is not None,
    "is_traceable_wrapper_subclass": lambda: (
        not _torch.is_traceable_wrapper_subclass(torch.ones(1))
    ),
    "tree_map": lambda: _torch.tree_map(lambda x: x + 1, ([1], {"a": 2})) == ([2], {"a": 3}),
    "tree_leaves": lambda: _torch.tree_leaves(([1], {"a": 2})) == [1, 2],
    "core_aten_decompositions": lambda: (
        torch.ops.aten.addcmul.default in _torch.core_aten_decompositions()
    ),
    "profiler_enabled": lambda: _torch.profiler_enabled() is False,
    "graph_codegen": lambda: type(_torch.graph_codegen(torch.fx.Graph())) is torch.fx.graph.CodeGen,
    "forget_graph_source": _graph_source_is_forgotten,
    "generated_forward": _lazy_modules_forward_is_their_code,
    "module_stack": _module_stacks_reach_backward_nodes,
    "resolve_process_group": lambda: callable(
        torch.distributed.distributed_c10d._resolve_process_group
    ),
    "allgather_base": _gloo_methods,
    "reduce_scatter_base": _gloo_methods,
    "aot_autograd": lambda: callable(_torch.aot_autograd(fw_compiler=lambda gm, _: gm)),
    "SerializableAOTDispatchCompiler": lambda: (
        _params(_torch.SerializableAOTDispatchCompiler.__init__)[1:3]
        == ["output_code_ty", "compiler_fn"]
    ),
    "dynamo_counters": lambda: isinstance(_torch.dynamo_counters["aot_autograd"]["x"], int),
    "BypassAOTAutogradCache": lambda: issubclass(_torch.BypassAOTAutogradCache, Exception),
    "OutputCode": lambda: (
        {"post_compile", "prepare_for_serialization"} <= set(dir(_torch.OutputCode))
    ),
    "GraphPickler": lambda: (
        callable(_torch.GraphPickler.dumps) and callable(_torch.GraphPickler.loads)
    ),
    "GraphPicklerOptions": lambda: (
        {"ops_filter", "node_metadata_key_filter"} <= set(_params(_torch.GraphPicklerOptions))
    ),
    "functorch_config": lambda: hasattr(_torch.functorch_config, "bundled_autograd_cache"),
    "OutputType": lambda: _torch.OutputType.non_alias is not None,
    "MutationType": lambda: (
        {"MUTATED_IN_GRAPH", "MUTATED_OUT_GRAPH"} <= set(_torch.MutationType.__members__)
    ),
    "PlainTensorMeta": lambda: inspect.isclass(_torch.PlainTensorMeta),
    "ViewAndMutationMeta": lambda: (
        {
            "input_info",
            "output_info",
            "num_intermediate_bases",
            "tokens",
            "subclass_inp_meta",
            "subclass_fw_graph_out_meta",
        }
        <= set(_torch.ViewAndMutationMeta.__dataclass_fields__)
        and "mutated_graph_handled_indices_seen_by_autograd"
        in inspect.getsource(_torch.ViewAndMutationMeta.__post_init__)
    ),
    "mark_dynamo_propagated_dynamic_indices": lambda: (
        _params(_torch.mark_dynamo_propagated_dynamic_indices) == ["t", "dims"]
    ),
    "ContinueExecutionCache": _resume_code_knows_its_function,
    "BackendCompilerFailed": lambda: (
        "inner_exception" in _params(_torch.BackendCompilerFailed.__init__)
    ),
    "opinfo_samples_untracked": _opinfo_samples_skip_the_stack_walk,
    "compile_fx_forward": _a_forward_graph_compiles_to_a_boxed_call,
    "create_compiler_config_extra": lambda: _params(_torch.create_compiler_config_extra) == ["gm"],
    "inductor_decompositions": lambda: (
        torch.ops.aten.index_copy.default in _torch.inductor_decompositions()
    ),
    "disable_current_modes": _modes_set_aside,
    "force_stride_order": _a_forced_stride_order_is_realized,
    "common_methods_invocations": lambda: (
        len(_torch.common_methods_invocations.op_db) > 100
        and callable(_torch.common_methods_invocations.wrapper_set_seed)
    ),
}


def test_every_door_name_has_a_canary():
    assert set(_torch.__all__) == set(CANARIES), (
        "add a canary for each name of nkipy_core._torch (and drop those of removed names)"
    )


@pytest.mark.parametrize("name", sorted(CANARIES))
def test_door_symbol_still_means_what_nkipy_relies_on(name):
    if name in {"allgather_base", "reduce_scatter_base", "resolve_process_group"}:
        if not dist.is_available():
            pytest.skip("torch is built without torch.distributed")
    if name == "common_methods_invocations":
        pytest.importorskip("expecttest")
    try:
        ok = CANARIES[name]()
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        pytest.fail(
            f"torch {torch.__version__} changed nkipy_core._torch.{name}: "
            f"{type(exc).__name__}: {exc}"
        )
    assert ok is not False, (
        f"torch {torch.__version__} changed nkipy_core._torch.{name}: its canary check failed"
    )


# -- nothing private outside the door -------------------------------------------------------------

#: private attributes of torch objects nkipy reads (only through the door)
TORCH_OBJECT_PRIVATES = {
    "_schema",
    "_overloadname",
    "_handle",
    "_codegen",
    "_allgather_base",
    "_reduce_scatter_base",
    "_typed_storage",
}


def _private(parts) -> bool:
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts)


def _chain(node) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _private_torch_uses(path: Path):
    """``(line, what)`` for each private torch name ``path`` reaches: imports of private modules
    or names, attribute chains from a torch module, and the private attributes of torch objects
    above. Op names under ``torch.ops`` (``torch.ops.aten._softmax``) are public."""
    tree = ast.parse(path.read_text(), str(path))
    torch_names: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "torch":
                    torch_names[alias.asname or "torch"] = parts if alias.asname else ["torch"]
                    if _private(parts):
                        yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] == "torch":
                for alias in node.names:
                    torch_names[alias.asname or alias.name] = [*parts, alias.name]
                    if _private([*parts, alias.name]):
                        yield node.lineno, f"from {node.module} import {alias.name}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if (
            node.attr in TORCH_OBJECT_PRIVATES
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            and not (isinstance(node.value, ast.Name) and node.value.id in torch_names)
        ):
            yield node.lineno, f"._{node.attr[1:]} of a torch object"
            continue
        chain = _chain(node)
        if chain is None or chain[0] not in torch_names:
            continue
        full = torch_names[chain[0]] + chain[1:]
        if full[:2] == ["torch", "ops"]:
            full = full[:2] + full[5:]  # namespace, op and overload names are data
        if _private(full[-1:]):
            yield node.lineno, ".".join(full)


def test_no_private_torch_outside_the_door():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for source in SOURCES
        for path in sorted(source.rglob("*.py"))
        if path != DOOR
        for line, what in sorted(set(_private_torch_uses(path)))
    ]
    assert not found, (
        "private torch API outside nkipy_core/_torch.py; add it to the door (with a canary in "
        "tests/core/test_torch_door.py) and use it from there:\n" + "\n".join(found)
    )


def test_the_scan_finds_each_kind_of_private_use(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import torch\n"
        "import torch._dynamo\n"
        "import torch.distributed as dist\n"
        "from torch._guards import TracingContext\n"
        "from torch.utils import _pytree\n"
        "x = torch._C._acc\n"
        "y = dist.distributed_c10d._resolve_process_group\n"
        "z = op._schema.name\n"
        "ok = torch.ops.aten._softmax.default, torch.ops._c10d_functional, torch.__version__\n"
    )
    found = {line for line, _ in _private_torch_uses(sample)}
    assert found == {2, 4, 5, 6, 7, 8}


# -- the supported torch range --------------------------------------------------------------------


def test_the_supported_range_is_nkipy_cores_declared_one():
    assert _torch.supported_torch() == ">=2.13,<2.14"
    _torch.check_torch()  # the torch these tests run on is supported


@pytest.mark.parametrize("installed", ["2.12.1", "2.14.0", "3.0.0", "2.14.0a0+git1234", "junk"])
def test_an_unsupported_torch_is_a_typed_error_naming_both_versions(installed):
    with pytest.raises(UnsupportedTorchError) as info:
        _torch.check_torch(installed)
    assert installed in str(info.value)
    assert _torch.supported_torch() in str(info.value)


@pytest.mark.parametrize("installed", ["2.13.0", "2.13.1+cpu", "2.13.2+cu130"])
def test_supported_torch_builds_pass(installed):
    _torch.check_torch(installed)


def test_without_package_metadata_the_default_range_applies(monkeypatch):
    def missing(name):
        raise _torch.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(_torch.importlib.metadata, "requires", missing)
    assert _torch.supported_torch() == ">=2.13,<2.14"
    with pytest.raises(UnsupportedTorchError, match="2.12.0"):
        _torch.check_torch("2.12.0")


def test_an_unsupported_torch_never_breaks_import_torch_or_import_nkipy_core():
    """The version is checked inside ``import torch`` (the device's autoload, when
    ``NKIPY_RUNTIME`` asks for the device): there it becomes a log line; ``import nkipy_core``
    checks nothing; using the door raises the typed error."""
    out = python(
        """
import torch
torch.__version__ = "2.12.0"
import nkipy_core
from nkipy_core.device.autoload import autoload
autoload()  # what torch calls inside `import torch`
try:
    from nkipy_core import _torch
except nkipy_core.UnsupportedTorchError as exc:
    print("raised:", exc)
""",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        NKIPY_RUNTIME="cpu",
    )
    assert out.returncode == 0, out.stderr
    assert "the nkipy device was not registered (UnsupportedTorchError" in out.stderr
    raised = out.stdout.splitlines()[-1]
    assert raised.startswith("raised: ") and "2.12.0" in raised and ">=2.13,<2.14" in raised


# -- no process-wide patches ----------------------------------------------------------------------


def test_plain_programs_see_torchs_own_storage_clone_and_import_machinery():
    """``import torch`` with nkipy installed (the device registers) leaves torch's
    ``UntypedStorage.clone`` and ``sys.meta_path`` as they are without it."""
    probe = """
import sys, torch
import torch.storage
print(torch.UntypedStorage.clone is torch.storage._StorageBase.clone)
print([type(f).__module__ + "." + type(f).__qualname__ for f in sys.meta_path])
print(torch._C._get_privateuse1_backend_name())
"""
    with_nkipy = python(probe, NKIPY_RUNTIME="cpu")  # the device registered inside import torch
    without = python(probe, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert with_nkipy.returncode == 0 and without.returncode == 0, with_nkipy.stderr
    same, finders, backend = with_nkipy.stdout.splitlines()[-3:]
    assert backend == "nkipy", "the device did not register: the check would prove nothing"
    assert same == "True"
    assert with_nkipy.stdout.splitlines()[-3:-1] == without.stdout.splitlines()[-3:-1]
    assert "nkipy" not in finders


def test_device_storages_copy_on_the_device_and_cpu_storages_stay_torchs(monkeypatch):
    monkeypatch.setenv("NKIPY_RUNTIME", "cpu")
    x = torch.arange(4.0).to("nkipy")
    deep = copy.deepcopy(copy.deepcopy(x))  # a copy of a copy: torch's class, adopted again
    assert torch.equal(deep.cpu(), torch.arange(4.0))
    assert deep.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    clone = x.untyped_storage().clone()
    assert clone.nbytes() == 16 and clone.device.type == "nkipy"
    cpu = torch.ones(2)
    assert type(cpu.untyped_storage()) is torch.UntypedStorage
    assert type(copy.deepcopy(cpu).untyped_storage()) is torch.UntypedStorage
    assert torch.UntypedStorage.clone is torch.storage._StorageBase.clone


def test_the_range_check_agrees_with_packaging():
    """The door decides a range without importing packaging's specifiers (about 10 ms inside
    every ``import torch``); it must decide as packaging does."""
    from packaging.specifiers import SpecifierSet

    versions = ["2.13.0+cpu", "2.13.0+cu121", "2.13", "2.13.5", "2.13.post1", "2.13.0rc1"]
    versions += ["2.13.0.dev20260101", "2.14.0a0+git1234", "2.14.0", "2.14.0.post1", "2.12.1"]
    ranges = [">=2.13,<2.14", ">2.13,<=2.14", "==2.13.0,!=2.13.5", "~=2.13.0", "<=2.13"]
    ranges += ["!=2.13.0", "==2.13.0+cpu", ">2.13"]
    differ = [
        (v, r)
        for v in versions
        for r in ranges
        if _torch._satisfies(v, r) != SpecifierSet(r).contains(v, prereleases=True)
    ]
    assert not differ


def test_import_torch_does_not_load_packaging_for_the_range_check():
    probe = "import sys, torch; print(hasattr(torch, 'nkipy'), 'packaging' in sys.modules)"
    result = python(probe, NKIPY_RUNTIME="cpu")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False"]
