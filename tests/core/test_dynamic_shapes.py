"""Graphs with symbolic sizes: one static kernel graph per size set, with the static path's
partitioning, strictness, fallback reporting and caches (``nkipy_core.dynamo.specialize``)."""

import warnings

import pytest
import torch
from fixture_packs import arithmetic_rules, pack
from torch._dynamo.exc import BackendCompilerFailed

from nkipy_core import (
    ConfigurationError,
    FallbackWarning,
    SpecializationLimitError,
    UnsupportedOpsError,
    cache_stats,
    init_nkipy_backend,
)
from nkipy_core.compiler.kernel_call import KernelCall


@pytest.fixture
def arithmetic(plugin_env):
    return plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.0")


@pytest.fixture(autouse=True)
def _counters_from_zero():
    """The tests assert exact counts of this test's specialisations and kernels."""
    cache_stats.clear()


def scaled(x):
    """Uses a size as a value, so the dynamic graph holds a SymInt input and size arithmetic."""
    return (torch.exp(x) * (x.shape[0] + 1)).mean([0]) + x.mean([0])


def on_cpu(gm):
    """The ATen ops a compiled graph left to torch."""
    return [
        n.target
        for n in gm.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
    ]


def run_sizes(fn, sizes, **compile_kwargs):
    """Call ``fn`` compiled on a tensor per size; every result checked against eager."""
    compiled = torch.compile(fn, backend="nkipy", **compile_kwargs)
    for rows in sizes:
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x), fn(x))
    return compiled


def test_a_second_size_gives_kernels_not_fallbacks(arithmetic, graphs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        run_sizes(scaled, [8, 9, 10])
    # (8, 4) static; then the automatic dynamic graph, specialised for 9 at compile time and 10 at call
    assert cache_stats["specializations"] == 2
    assert len(graphs) == 3
    for gm in graphs:
        assert on_cpu(gm) == []
        assert sum(isinstance(m, KernelCall) for m in gm.children()) == 1
    assert str(graphs[2].nkipy_kernel_0.executable.signature.inputs[0]) == "f32[10x4]"


@pytest.mark.parametrize("how", ["dynamic=True", "mark_dynamic", "mark_unbacked"])
def test_dynamic_and_marked_sizes_specialise_from_the_first_call(arithmetic, graphs, how):
    """``mark_unbacked`` sizes have no value at compile time (and come with runtime asserts):
    they are specialised at the call."""
    compiled = torch.compile(
        scaled, backend="nkipy", dynamic=True if how == "dynamic=True" else None
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for rows in (5, 7, 6):
            x = torch.randn(rows, 4)
            if how != "dynamic=True":
                getattr(torch._dynamo.decorators, how)(x, 0)
            torch.testing.assert_close(compiled(x), scaled(x))
    assert cache_stats["specializations"] == 3
    assert [on_cpu(gm) for gm in graphs] == [[], [], []]


def test_repeated_sizes_reuse_the_kernels_in_memory(arithmetic):
    compiled = run_sizes(scaled, [3, 4, 5], dynamic=True)
    before = dict(cache_stats)
    for rows in (4, 3, 5, 4):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x), scaled(x))
    assert dict(cache_stats) == before


def test_a_warm_disk_cache_specialises_without_lowering(arithmetic):
    run_sizes(scaled, [3, 4, 5], dynamic=True)
    assert cache_stats["lowered_kernels"] == 3
    torch._dynamo.reset()  # a new compile of the same function: nothing in memory
    cache_stats.clear()
    run_sizes(scaled, [5, 3, 4], dynamic=True)
    assert cache_stats["specializations"] == 3
    assert (
        cache_stats["lowered_kernels"]
        == cache_stats["planned_nodes"]
        == cache_stats["compiled_kernels"]
        == 0
    )
    assert cache_stats["hits"] == 3


def test_past_the_limit_new_sizes_run_as_torch_with_one_warning(arithmetic):
    compiled = torch.compile(
        scaled, backend="nkipy", dynamic=True, options={"max_specializations": 2}
    )
    for rows in (2, 3):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x), scaled(x))
    with pytest.warns(FallbackWarning) as record:
        x = torch.randn(4, 4)
        torch.testing.assert_close(compiled(x), scaled(x))
    (warning,) = record
    message = str(warning.message)
    assert "the forward graph of scaled (" in message
    assert "max_specializations=2" in message and "new sizes run op by op in eager torch" in message
    assert "init_nkipy_backend(max_specializations=...)" in message
    assert cache_stats["specializations"] == 2 and cache_stats["unspecialized_calls"] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # warned once per graph
        for rows in (5, 4, 2):
            x = torch.randn(rows, 4)
            torch.testing.assert_close(compiled(x), scaled(x))
    assert (
        cache_stats["specializations"] == 2 and cache_stats["unspecialized_calls"] == 3
    )  # 2 kept its kernels


def test_strict_mode_past_the_limit_raises(arithmetic):
    compiled = torch.compile(
        scaled, backend="nkipy", dynamic=True, options={"strict": True, "max_specializations": 1}
    )
    compiled(torch.randn(2, 4))
    with pytest.raises(SpecializationLimitError, match="already specialised for 1 size sets"):
        compiled(torch.randn(3, 4))


def test_strict_mode_rejects_unsupported_ops_of_a_dynamic_graph_at_compile_time(arithmetic):
    def fn(x):
        return torch.tanh(torch.exp(x) * x.shape[0])

    with pytest.raises(BackendCompilerFailed) as err:
        torch.compile(fn, backend="nkipy", dynamic=True, options={"strict": True})(torch.randn(3))
    inner = err.value.inner_exception
    assert isinstance(inner, UnsupportedOpsError)
    assert inner.ops == ["aten::tanh.default (no installed pack lowers it)"]


def test_unsupported_ops_of_a_dynamic_graph_fall_back_like_a_static_one(arithmetic, graphs):
    def fn(x):
        return torch.tanh(torch.exp(x) * x.shape[0]) + x

    with pytest.warns(
        FallbackWarning, match="aten::tanh.default runs on CPU: no installed pack lowers it"
    ):
        run_sizes(fn, [3], dynamic=True)
    (gm,) = graphs
    assert on_cpu(gm) == [torch.ops.aten.tanh.default]
    assert sum(isinstance(m, KernelCall) for m in gm.children()) == 2


def test_data_dependent_sizes_stay_on_cpu_with_that_reason(arithmetic):
    def fn(x):
        return torch.exp(x[x > 0]).sum()

    # torch's own patch: monkeypatch's undo deletes the setting, which hides it from dynamo
    with (
        torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True),
        pytest.warns(
            FallbackWarning,
            match="aten::exp.default runs on CPU: it produces a data-dependent shape",
        ),
    ):
        x = torch.randn(16)
        torch.testing.assert_close(torch.compile(fn, backend="nkipy")(x), fn(x))
    assert cache_stats["specializations"] == 0


def test_max_specializations_is_an_init_setting_and_checked():
    assert init_nkipy_backend(max_specializations=4).max_specializations == 4
    with pytest.raises(BackendCompilerFailed) as err:
        torch.compile(scaled, backend="nkipy", options={"max_specializations": 0})(
            torch.randn(2, 4)
        )
    assert isinstance(err.value.inner_exception, ConfigurationError)
    assert "max_specializations must be a positive integer, got 0" in str(err.value.inner_exception)
