"""``stored_graph``: a graph ``compile_graph`` returned, as data, rebuilt from the kernel cache.

``tests/core/test_warm_start.py`` runs it where it matters, across processes through torch's
AOTAutograd cache; these tests check the rebuilt graph in one process and what is refused."""

import shutil
import warnings
from pathlib import Path

import pytest
import torch
import torch.fx
from fixture_packs import arithmetic_rules, pack

from nkipy_core import FallbackWarning, cache_stats
from nkipy_core.compiler.fallback import FALLBACKS
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.config.settings import current
from nkipy_core.dynamo import stored_graph


@pytest.fixture
def arithmetic(plugin_env):
    return plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.0")


def kernels(gm):
    """The graph's kernel calls, in the order it calls them."""
    calls = [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "call_module"]
    assert all(isinstance(c, KernelCall) for c in calls)
    return calls


def fn(a):
    """Two kernels around a CPU op (``tanh``: the test pack lowers no tanh), and a constant."""
    return torch.tanh(torch.exp(a) * a) * torch.tensor([1.0, 2.0, 3.0, 4.0]) + a


def test_the_rebuilt_graph_loads_its_kernels_warns_and_computes_the_same(arithmetic, graphs):
    x = torch.randn(3, 4)
    with pytest.warns(FallbackWarning):
        torch.compile(fn, backend="nkipy")(x)
    (compiled,) = graphs
    assert len(kernels(compiled)) == 2
    data, why = stored_graph.dumps(compiled)
    assert why is None
    before = dict(cache_stats)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rebuilt = stored_graph.loads(data, current())
    assert sorted(str(w.message) for w in caught if issubclass(w.category, FallbackWarning)) == [
        "nkipy: aten::lift_fresh_copy.default runs on CPU: no installed pack lowers it",
        "nkipy: aten::tanh.default runs on CPU: no installed pack lowers it",
    ]
    assert [k.entry for k in kernels(rebuilt)] == [k.entry for k in kernels(compiled)]
    assert cache_stats["hits"] == before.get("hits", 0) + 2
    assert cache_stats["lowered_kernels"] == before["lowered_kernels"]  # loaded by key, not lowered
    torch.testing.assert_close(rebuilt(x), compiled(x))
    torch.testing.assert_close(rebuilt(x)[0], fn(x))


def test_a_kernel_missing_from_the_cache_gives_none_and_no_warnings(arithmetic, graphs):
    with pytest.warns(FallbackWarning):
        torch.compile(fn, backend="nkipy")(torch.randn(3, 4))
    (compiled,) = graphs
    data, _ = stored_graph.dumps(compiled)
    shutil.rmtree(Path(current().nkipy_cache) / "kernels" / kernels(compiled)[1].entry)
    misses = cache_stats["misses"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert stored_graph.loads(data, current()) is None
    assert cache_stats["misses"] == misses  # the compile that follows counts the miss


def _graph(target, *args) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(target, (x, *args)))
    gm = torch.fx.GraphModule({}, graph)
    gm.meta[FALLBACKS] = {}
    return gm


def test_what_would_not_come_back_as_itself_is_not_stored():
    def local(x):
        return x

    _, why = stored_graph.dumps(_graph(local))
    assert why.startswith("its compiled graph cannot be stored") and "local" in why
    _, why = stored_graph.dumps(_graph(torch.ops.higher_order.cond))
    assert "is not an ATen overload, a function or data" in why
    module = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.ReLU()))
    assert stored_graph.dumps(module) == (None, "its submodule 0 is a ReLU, not a kernel call")


def test_a_graph_with_its_own_code_generator_is_not_stored():
    class Boxed(torch.fx.graph.CodeGen):
        pass

    gm = _graph(torch.ops.aten.relu.default)
    gm.graph.set_codegen(Boxed())
    assert stored_graph.dumps(gm) == (None, "its graph has its own code generator (Boxed)")


def test_a_stored_graph_keeps_cpu_constants_only():
    gm = _graph(torch.ops.aten.add.Tensor, None)
    gm.register_buffer("weight", torch.ones(2).to("nkipy"))
    add = next(n for n in gm.graph.nodes if n.op == "call_function")
    with gm.graph.inserting_before(add):
        add.args = (add.args[0], gm.graph.get_attr("weight"))
    gm.recompile()
    _, why = stored_graph.dumps(gm)
    assert "a constant is a Tensor on nkipy:0, not a CPU tensor" in why
