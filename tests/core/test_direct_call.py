"""Inference graphs called without AOTAutograd's runtime wrapper where it would do nothing, and
every graph it has work for still called through it (``nkipy_core.dynamo.direct_call``)."""

import sys
import warnings

import pytest
import torch
from fixture_packs import arithmetic_rules, pack

from nkipy_core import FallbackWarning, cache_stats


@pytest.fixture
def arithmetic(plugin_env):
    return plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.0")


def compiled_call(fn, *args, **compile_kwargs):
    """``fn`` compiled by nkipy, called on ``args``: its result, whether the graph was called
    directly or through the wrapper (from ``cache_stats``), and the frames of AOTAutograd's
    runtime wrapper in a second call."""
    before = {k: cache_stats[k] for k in ("direct_graphs", "wrapped_graphs")}
    compiled = torch.compile(fn, backend="nkipy", **compile_kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        compiled(
            *[a.clone() if isinstance(a, torch.Tensor) and not a.requires_grad else a for a in args]
        )
    way = [k for k in before if cache_stats[k] > before[k]]
    frames = []

    def profile(frame, event, _):
        if event == "call" and frame.f_code.co_filename.endswith(
            ("runtime_wrappers.py", "functorch/aot_autograd.py")
        ):
            frames.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        out = compiled(*args)
    finally:
        sys.setprofile(None)
    return out, way, frames


def test_an_inference_graph_without_mutations_or_aliases_is_called_directly(arithmetic):
    def fn(a, b):
        return torch.exp(a) * b + 1, a - b

    a, b = torch.randn(4, 5), torch.randn(4, 5)
    out, way, frames = compiled_call(fn, a, b)
    assert way == ["direct_graphs"] and frames == []
    for got, want in zip(out, fn(a, b)):
        torch.testing.assert_close(got, want)


def test_a_module_under_no_grad_with_a_cpu_op_is_called_directly(arithmetic):
    layer = torch.nn.Linear(6, 3)

    def fn(x):
        return torch.tanh(layer(x)) * 2  # tanh: not in the test pack, a CPU region

    x = torch.randn(2, 6)
    with torch.no_grad():
        out, way, frames = compiled_call(fn, x)
        expected = fn(x)
    assert way == ["direct_graphs"] and frames == []
    torch.testing.assert_close(out, expected)


def test_grad_mode_on_without_inputs_that_require_grad_gives_outputs_without_history(arithmetic):
    def fn(x):
        return torch.tanh(x * 3) + x  # a CPU op runs with grad mode on: still no history

    x = torch.randn(5)
    out, way, _ = compiled_call(fn, x)
    assert way == ["direct_graphs"]
    assert not out.requires_grad and out.grad_fn is None
    torch.testing.assert_close(out, fn(x))


def test_a_graph_with_symbolic_sizes_is_called_directly_and_marks_its_outputs_as_the_wrapper_does(
    arithmetic,
):
    def fn(a, b):
        return torch.exp(a) * b + a.shape[0], (a - b).sum(0)

    a, b = torch.randn(5, 3), torch.randn(5, 3)
    out, way, frames = compiled_call(fn, a, b, dynamic=True)
    # of the wrapper's module only the function that marks outputs runs, once per output
    assert way == ["direct_graphs"] and frames == ["mark_dynamo_propagated_dynamic_indices"] * 2
    for got, want in zip(out, fn(a, b)):
        torch.testing.assert_close(got, want)
    # what AOTAutograd's runtime wrapper marks on the outputs of torch's own aot_eager backend
    reference = torch.compile(fn, backend="aot_eager", dynamic=True)(a, b)
    marks = [getattr(t, "_dynamo_propagated_dynamic_indices", None) for t in reference]
    assert marks == [{0, 1}, {0}]
    assert [getattr(t, "_dynamo_propagated_dynamic_indices", None) for t in out] == marks


def test_sizes_stay_dynamic_across_a_graph_break_with_a_direct_graph(arithmetic):
    """The outputs' marks make the graph after a break symbolic from its first compile: a new
    size is a specialisation, not a recompile."""
    first = torch.compile(lambda x: torch.exp(x) * 2, backend="nkipy", dynamic=True)
    second = torch.compile(lambda y: y - 1, backend="nkipy")
    compiles = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    before = dict(cache_stats)
    for rows in (4, 6, 7):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(second(first(x)), torch.exp(x) * 2 - 1)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - compiles == 2
    assert cache_stats["direct_graphs"] - before.get("direct_graphs", 0) == 2


@pytest.mark.parametrize("dynamic", [False, True])
def test_inputs_that_require_grad_with_detached_outputs_keep_the_wrapper_and_record_no_history(
    arithmetic, dynamic
):
    """AOTAutograd compiles an inference graph when no output requires grad; torch ops the graph
    runs on such an input (a CPU op here; every op past the specialisation limit) must still
    record no history, as the wrapper's grad-mode switch ensures."""

    def fn(x):
        return torch.tanh(x * 2).detach() + 1, (x - 1).detach()  # tanh: not in the test pack

    compiled = torch.compile(
        fn, backend="nkipy", dynamic=dynamic, options={"max_specializations": 1}
    )
    before = cache_stats["wrapped_graphs"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        for rows in (4, 5, 6):  # 5 and 6: past the limit when dynamic
            x = torch.randn(rows, 3, requires_grad=True)
            out = compiled(x)
            assert [t.requires_grad for t in out] == [False, False]
            for got, want in zip(out, fn(x)):
                torch.testing.assert_close(got, want)
    assert cache_stats["wrapped_graphs"] > before


def test_an_input_written_in_the_graph_is_called_directly_and_its_version_counted(arithmetic):
    """A decode step writing its caches: the graph writes the input (AOTAutograd keeps the
    mutation in it), and the direct call increments its version counter, as the wrapper and
    every in-place op do."""

    def fn(a, b):
        a.mul_(2)
        return a + b

    a, b = torch.randn(3, 4), torch.randn(3, 4)
    expected_a = a.clone()
    expected = fn(expected_a, b)
    version = a._version
    out, way, frames = compiled_call(fn, a, b)
    assert way == ["direct_graphs"] and frames == []
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(a, expected_a)
    assert a._version > version  # autograd sees the mutation
    with torch.no_grad():
        c = torch.randn(3, 4, requires_grad=True)
        version = c._version
        compiled_call(fn, c, b)
    assert c._version > version


def test_an_optimizer_step_holding_its_parameters_is_called_directly(arithmetic):
    """Dynamo installs the parameters and states of a compiled optimizer step in its graph;
    the direct call passes them before the inputs, as the wrapper does, and moves the versions
    of those the step writes."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    expected = [p.detach().clone() for p in params]
    for p, e in zip(params, expected):
        p.grad = torch.randn_like(p)
        e.sub_(p.grad, alpha=0.1)
    versions = [p._version for p in params]
    optimizer = torch.optim.SGD(params, lr=0.1)
    before = cache_stats["direct_graphs"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        torch.compile(optimizer.step, backend="nkipy")()
    assert cache_stats["direct_graphs"] > before
    for p, e, v in zip(params, expected, versions):
        torch.testing.assert_close(p.detach(), e)
        assert p._version > v


def test_an_input_written_outside_the_graph_keeps_the_wrapper(monkeypatch):
    """Dynamo breaks the graph at an input's in-place view op, so AOTAutograd gets no such
    graph from it: what AOTAutograd would keep out of the graph is decided from its metadata."""
    from types import SimpleNamespace

    from nkipy_core import _torch
    from nkipy_core.dynamo import direct_call

    def written(mutation_type, metadata=False):
        info = SimpleNamespace(mutates_metadata=metadata, mutation_type=mutation_type)
        meta = SimpleNamespace(input_info=[info], output_info=[], num_intermediate_bases=1)
        monkeypatch.setattr(direct_call, "_metadata", lambda: meta)
        return direct_call.why_wrapped(1)

    assert written(_torch.MutationType.MUTATED_OUT_GRAPH) == "it mutates an input outside the graph"
    assert written(_torch.MutationType.MUTATED_IN_GRAPH, metadata=True) == (
        "it mutates an input outside the graph"
    )
    # past the inputs' check: the next one (its intermediate bases) says why
    assert written(_torch.MutationType.MUTATED_IN_GRAPH).startswith("it returns intermediate bases")


def test_an_output_that_is_a_view_of_an_input_keeps_the_wrapper_and_aliases_as_in_eager(arithmetic):
    def fn(a):
        return a.view(-1), a * 2

    a = torch.randn(2, 3)
    out, way, frames = compiled_call(fn, a)
    assert way == ["wrapped_graphs"] and frames
    for got, want in zip(out, fn(a)):
        torch.testing.assert_close(got, want)
    a.add_(1)  # the view shares the input's memory, as in eager
    torch.testing.assert_close(out[0].reshape(2, 3), a)


@pytest.mark.parametrize("case", ["the input itself", "one output twice"])
def test_outputs_dynamo_returns_itself_alias_as_in_eager_with_a_direct_graph(arithmetic, case):
    def fn(a):
        y = a * 2
        return (a, y) if case == "the input itself" else (y, y)

    a = torch.randn(2, 3)
    out, way, frames = compiled_call(fn, a)
    assert way == ["direct_graphs"] and frames == []  # the graph returns only y
    for got, want in zip(out, fn(a)):
        torch.testing.assert_close(got, want)
    assert out[0] is (a if case == "the input itself" else out[1])


def test_training_graphs_keep_the_wrapper_and_differentiate(arithmetic):
    def fn(x, w):
        return (torch.exp(x * w) * x).sum()

    x, w = torch.randn(3, 4), torch.randn(4, requires_grad=True)
    out, way, frames = compiled_call(fn, x, w)
    assert way == ["wrapped_graphs"] and frames
    out.backward()
    w_ = w.detach().clone().requires_grad_()
    fn(x, w_).backward()
    torch.testing.assert_close(w.grad, w_.grad)


def test_autocast_keeps_the_wrapper(arithmetic):
    def fn(a, b):
        return a * b + 1

    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, way, _ = compiled_call(fn, a, b)
        expected = fn(a, b)
    assert way == ["wrapped_graphs"]
    torch.testing.assert_close(out, expected)


def test_why_a_graph_keeps_the_wrapper_is_logged(arithmetic, caplog):
    def fn(a):
        return a.view(-1), a * 2

    with caplog.at_level("DEBUG", logger="nkipy.direct_call"):
        compiled_call(fn, torch.randn(3, 2))
    assert "keeps AOTAutograd's runtime wrapper: an output aliases an input" in caplog.text
