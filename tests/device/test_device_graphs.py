"""Compiled graphs on the nkipy device: device tensors in and out, no host round trips between
graphs, CPU regions, kernel boundaries and torch.compiler.disable."""

import warnings

import pytest
import torch

from nkipy_core import FallbackWarning, kernel_boundary, on_cpu
from nkipy_core.compiler import regions
from nkipy_core.compiler.kernel_call import KernelCall


def kernels(graphs):
    return [m for g in graphs for m in g.modules() if isinstance(m, KernelCall)]


def test_compiled_function_takes_and_returns_device_tensors(graphs):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    expected = model(x)
    model.to("nkipy")
    out = torch.compile(model, backend="nkipy")(x.to("nkipy"))
    assert out.device.type == "nkipy"
    torch.testing.assert_close(out.cpu(), expected)
    assert len(kernels(graphs)) == 1


def test_no_host_transfers_between_compiled_graphs_or_for_parameters():
    torch.manual_seed(0)
    first, second = torch.nn.Linear(8, 16).to("nkipy"), torch.nn.Linear(16, 4).to("nkipy")
    f = torch.compile(lambda a: torch.relu(first(a)), backend="nkipy")
    g = torch.compile(lambda a: second(a).softmax(-1), backend="nkipy")
    x = torch.randn(5, 8).to("nkipy")
    g(f(x))  # compile both
    before = torch.nkipy.transfer_stats()
    for _ in range(3):
        out = g(f(x))
    assert torch.nkipy.transfer_stats() == before  # parameters, inputs and the hand-over stay put
    assert out.device.type == "nkipy"
    reference = torch.softmax(second.cpu()(torch.relu(first.cpu()(x.cpu()))), -1)
    torch.testing.assert_close(out.cpu(), reference)


def test_compiled_training_step_on_the_device():
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    reference = torch.nn.Linear(6, 3)
    reference.load_state_dict(model.state_dict())
    model.to("nkipy")
    x, y = torch.randn(4, 6), torch.randn(4, 3)
    loss_fn = torch.compile(lambda m, a, b: torch.nn.functional.mse_loss(m(a), b), backend="nkipy")
    loss_fn(model, x.to("nkipy"), y.to("nkipy")).backward()
    torch.nn.functional.mse_loss(reference(x), y).backward()
    assert model.weight.grad.device.type == "nkipy"
    torch.testing.assert_close(model.weight.grad.cpu(), reference.weight.grad)


def test_hybrid_program_matches_cpu():
    torch.manual_seed(0)
    first, second = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)
    x = torch.randn(4, 16)
    expected = second(torch.nn.functional.silu(first(x)))
    c1 = torch.compile(first.to("nkipy"), backend="nkipy")
    c2 = torch.compile(second.to("nkipy"), backend="nkipy")
    out = c2(torch.nn.functional.silu(c1(x.to("nkipy")).cpu()).to("nkipy"))
    assert out.device.type == "nkipy"
    torch.testing.assert_close(out.cpu(), expected)


def block(x):
    h = torch.sin(x) * 2
    with on_cpu():
        h = torch.exp(h) + 1
    return torch.cos(h)


@pytest.mark.parametrize("device", ["cpu", "nkipy"])
def test_cpu_region_runs_as_torch_on_cpu(graphs, monkeypatch, device):
    seen = []
    run_on_cpu = regions.run_on_cpu

    def spy(op, *args, **kwargs):
        seen.append((str(op), {a.device.type for a in args if isinstance(a, torch.Tensor)}))
        return run_on_cpu(op, *args, **kwargs)

    monkeypatch.setattr(regions, "run_on_cpu", spy)
    x = torch.randn(4, 4, requires_grad=True)
    xd = x.detach().to(device).requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # a region is not a fallback
        out = torch.compile(block, backend="nkipy")(xd)
        out.sum().backward()
    block(x).sum().backward()
    assert out.device.type == device
    torch.testing.assert_close(out.detach().cpu(), block(x).detach())
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    forward_region = [op for op, _ in seen[:2]]
    assert forward_region == ["aten.exp.default", "aten.add.Tensor"]
    assert [op for op, _ in seen[2:]] == ["aten.mul.Tensor"]  # exp's backward: in the region too
    # the region splits the rest into a kernel before and a kernel after it (forward graph)
    forward_kernels = [m for m in graphs[0].modules() if isinstance(m, KernelCall)]
    assert len(forward_kernels) == 2


def test_kernel_boundary_splits_kernels(graphs):
    def f(x):
        y = torch.relu(x) * 3
        return torch.tanh(kernel_boundary(y)) + 1

    x = torch.randn(6, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        out = torch.compile(f, backend="nkipy")(x.to("nkipy"))
    torch.testing.assert_close(out.cpu(), torch.tanh(torch.relu(x) * 3) + 1)
    assert len(kernels(graphs)) == 2
    torch._dynamo.reset()
    graphs.clear()
    torch.compile(lambda x: torch.tanh(torch.relu(x) * 3) + 1, backend="nkipy")(x.to("nkipy"))
    assert len(kernels(graphs)) == 1  # without the marker: one kernel


def test_compiler_disable_is_respected(graphs):
    calls = []

    @torch.compiler.disable
    def eager_part(t):
        calls.append(t.device.type)
        return torch.sigmoid(t)

    def f(x):
        return eager_part(torch.sin(x)) * 2

    x = torch.randn(5)
    out = torch.compile(f, backend="nkipy")(x.to("nkipy"))
    torch.testing.assert_close(out.cpu(), torch.sigmoid(torch.sin(x)) * 2)
    assert calls == ["nkipy"]  # ran eagerly, on the device
    compiled_ops = {str(n.target) for g in graphs for n in g.graph.nodes}
    assert not any("sigmoid" in op for op in compiled_ops)
    assert len(graphs) == 2  # dynamo broke the graph around it
