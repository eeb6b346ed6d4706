"""The compile path end to end with an in-process pack: partitioning, fallback, mutation, training."""

import json
import warnings

import numpy as np
import pytest
import torch
from fixture_packs import arithmetic_rules, pack, wrong_shape_rules
from torch._dynamo.exc import BackendCompilerFailed

from nkipy_core import FallbackWarning, UnsupportedOpsError, VerificationError, cache_stats
from nkipy_core.cli.main import main
from nkipy_core.compiler.kernel_call import KernelCall, entry
from nkipy_core.runtime.cpu import CpuRuntime


@pytest.fixture
def arithmetic(plugin_env):
    return plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.0")


def kernels(gm):
    return [m for m in gm.children() if isinstance(m, KernelCall)]


def test_core_alone_runs_everything_on_cpu_with_one_warning_per_op(plugin_env):
    def fn(x):
        return torch.exp(x) * 2 + torch.tanh(x)

    x = torch.randn(4, 4)
    with pytest.warns(FallbackWarning) as record:
        out = torch.compile(fn, backend="nkipy")(x)
    torch.testing.assert_close(out, fn(x))
    messages = sorted(str(w.message) for w in record if issubclass(w.category, FallbackWarning))
    assert messages == [
        f"nkipy: aten::{op} runs on CPU: no installed pack lowers it"
        for op in ("add.Tensor", "exp.default", "mul.Tensor", "tanh.default")
    ]


def test_supported_regions_become_kernels_around_a_cpu_op(arithmetic, graphs):
    def fn(x):
        y = torch.exp(x) * x  # kernel
        z = torch.tanh(y)  # not lowered by the test pack: CPU
        return z + y * 2  # kernel

    x = torch.randn(8)
    with pytest.warns(FallbackWarning, match="aten::tanh.default runs on CPU"):
        out = torch.compile(fn, backend="nkipy")(x)
    torch.testing.assert_close(out, fn(x))
    (gm,) = graphs
    assert len(kernels(gm)) == 2
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [
        torch.ops.aten.tanh.default
    ]


def test_strict_mode_lists_every_unsupported_op(arithmetic):
    def fn(x):
        return torch.tanh(torch.exp(x)).sin()

    with pytest.raises(BackendCompilerFailed) as err:
        torch.compile(fn, backend="nkipy", options={"strict": True})(torch.randn(3))
    inner = err.value.inner_exception
    assert isinstance(inner, UnsupportedOpsError)
    assert inner.ops == [
        "aten::sin.default (no installed pack lowers it)",
        "aten::tanh.default (no installed pack lowers it)",
    ]
    assert "compile with strict=False to run them on CPU" in str(inner)


def test_a_packs_cpu_note_is_the_fallback_reason(plugin_env, capsys):
    """A pack that says why an op stays on CPU: its reason, not "no installed pack lowers it",
    is in the warning, in strict mode's error and in the coverage report."""
    rules = arithmetic_rules()
    rules.stays_on_cpu(torch.ops.aten.sin.default, "sines wait for a table-free range reduction")
    plugin_env.add(pack(rules), "noted", "noted-pack", "2.0")
    reason = "sines wait for a table-free range reduction (noted-pack)"

    def fn(x):
        return torch.exp(x).sin() + torch.tanh(x)

    x = torch.randn(5)
    with pytest.warns(FallbackWarning) as record:
        torch.testing.assert_close(torch.compile(fn, backend="nkipy")(x), fn(x))
    assert sorted(str(w.message) for w in record if issubclass(w.category, FallbackWarning)) == [
        f"nkipy: aten::sin.default runs on CPU: {reason}",
        "nkipy: aten::tanh.default runs on CPU: no installed pack lowers it",
    ]
    torch._dynamo.reset()
    with pytest.raises(BackendCompilerFailed) as err:
        torch.compile(fn, backend="nkipy", options={"strict": True})(x)
    assert err.value.inner_exception.ops == [
        f"aten::sin.default ({reason})",
        "aten::tanh.default (no installed pack lowers it)",
    ]

    assert main(["list", "--coverage", "core-aten", "--format", "json"]) == 0
    stays = json.loads(capsys.readouterr().out)["stays_on_cpu"]
    assert stays == [
        {
            "op": "aten::sin.default",
            "reason": "sines wait for a table-free range reduction",
            "provider": "noted-pack",
            "lowered_otherwise": False,
        }
    ]


def test_training_forward_and_backward(arithmetic, graphs):
    w = torch.randn(6, requires_grad=True)

    def fn(x):
        return (torch.exp(x * w) + x).mean(dim=[0])

    x = torch.randn(3, 6, requires_grad=True)
    out = torch.compile(fn, backend="nkipy")(x)
    out.sum().backward()
    grads = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    expected = fn(x)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grads, (x.grad, w.grad))
    assert len(graphs) == 2 and all(kernels(g) for g in graphs)  # forward and backward compiled


class RunningMean(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))

    def forward(self, x):
        self.mean.mul_(0.9).add_(x.mean(dim=[0]) * 0.1)  # in-place update of a buffer
        return x * 2 + self.mean


def test_input_mutations_are_written_back(arithmetic):
    eager, compiled_module = RunningMean(), RunningMean()
    compiled = torch.compile(compiled_module, backend="nkipy")
    for step in range(3):
        x = torch.randn(5, 4) + step
        torch.testing.assert_close(compiled(x), eager(x))
    torch.testing.assert_close(compiled_module.mean, eager.mean)


def test_complex_tensors_fall_back_to_cpu_without_a_complex_rule(arithmetic):
    """The fixture pack's rules compute on real numbers: none is given a complex node."""
    x = torch.randn(4, dtype=torch.complex64)
    with pytest.warns(
        FallbackWarning,
        match=r"aten::mul.Tensor runs on CPU: no installed pack lowers it for complex tensors",
    ):
        out = torch.compile(lambda a: a * 2, backend="nkipy")(x)
    torch.testing.assert_close(out, x * 2)


def test_sparse_inputs_run_eagerly(arithmetic, graphs):
    x = torch.randn(3, 3).to_sparse()
    out = torch.compile(lambda a: a * 2, backend="nkipy")(x)
    torch.testing.assert_close(out.to_dense(), x.to_dense() * 2)
    assert graphs == []  # dynamo itself runs sparse code eagerly; the backend never sees it


def test_half_precision_inputs(arithmetic):
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(16, dtype=dtype)
        torch._dynamo.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            out = torch.compile(lambda a: torch.exp(a) * a + 1, backend="nkipy")(x)
        assert out.dtype == dtype
        torch.testing.assert_close(out, torch.exp(x) * x + 1)


def test_rule_returning_the_wrong_shape_is_a_verification_error(plugin_env):
    plugin_env.add(pack(wrong_shape_rules()), "wrong", "wrong-pack", "0.1")
    with pytest.raises(BackendCompilerFailed) as err:
        torch.compile(torch.exp, backend="nkipy")(torch.randn(3, 4))
    inner = err.value.inner_exception
    assert isinstance(inner, VerificationError)
    assert str(inner).startswith(
        "lowering rule fixture_packs.wrong_shape_rules.<locals>.exp_wrong_shape from wrong-pack 0.1 for "
        "aten::exp.default returned f32[4], but the op produces f32[3x4]"
    )


def test_kernel_outputs_do_not_alias_inputs(arithmetic):
    def fn(x):
        return x * 1, x + 0

    x = torch.randn(4)
    a, b = torch.compile(fn, backend="nkipy")(x)
    a.add_(1)
    torch.testing.assert_close(b, x)
    assert cache_stats["compiled_kernels"] >= 1


def test_sdpa_training_without_any_pack_has_correct_gradients(plugin_env):
    """torch's export-only decomposition of CPU flash attention must not reach training graphs."""
    from nkipy_core.testing.models import LlamaBlock

    model = LlamaBlock(sdpa=True)
    x = model.example_input().requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    with pytest.warns(
        FallbackWarning,
        match="aten::_scaled_dot_product_flash_attention_for_cpu.default runs on CPU",
    ):
        torch.compile(model, backend="nkipy")(x).sum().backward()
    model(x_ref).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)


def test_a_one_kernel_graph_runs_as_its_kernel_call(arithmetic, graphs):
    x, y = torch.randn(4, 6), torch.randn(6, 4).t()  # y: a strided input
    fn = torch.compile(lambda a, b: torch.exp(a) * b + a, backend="nkipy")
    for _ in range(2):
        torch.testing.assert_close(fn(x, y), torch.exp(x) * y + x)
    (gm,) = graphs
    (call,) = kernels(gm)
    run = entry(gm)
    assert run == call.as_graph
    (out,) = run(x, y)
    torch.testing.assert_close(out, gm(x, y)[0])


def test_a_graph_with_cpu_ops_runs_as_its_forward(arithmetic, graphs):
    fn = torch.compile(lambda a: torch.exp(torch.tanh(a)) * a, backend="nkipy")  # tanh: no rule
    x = torch.randn(5)
    with pytest.warns(FallbackWarning, match="tanh"):
        torch.testing.assert_close(fn(x), torch.exp(torch.tanh(x)) * x)
    (gm,) = graphs
    assert entry(gm) == gm.forward


def test_a_kernel_call_takes_tensors_that_require_grad(arithmetic, graphs):
    x = torch.randn(4)
    torch.compile(lambda a: torch.exp(a) * a, backend="nkipy")(x)
    (call,) = kernels(graphs[0])
    w = x.clone().requires_grad_()
    torch.testing.assert_close(call(w), torch.exp(x) * x)


def test_host_results_never_share_memory_with_inputs_or_each_other():
    runtime = CpuRuntime()
    x = np.arange(6.0).reshape(2, 3)
    fresh = x * 2

    def kernel(
        a,
    ):  # what kernels may return: an input, a view of it, one value twice, views of a result
        return a, a[0], fresh, fresh[1], fresh, np.broadcast_to(a[0], (2, 3))

    results = runtime.run_host(kernel, [x])
    assert [r.tolist() for r in results] == [
        x.tolist(),
        x[0].tolist(),
        fresh.tolist(),
        fresh[1].tolist(),
        fresh.tolist(),
        [x[0].tolist()] * 2,
    ]
    for i, r in enumerate(results):
        assert r.flags.writeable
        assert not np.may_share_memory(r, x)
        assert not any(np.may_share_memory(r, o) for o in results[:i])
