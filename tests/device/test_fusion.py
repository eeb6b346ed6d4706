"""Eager fusion: queued eager ops run as fused kernels where torch needs a value, with per-op
eager's numbers, a kernel per graph structure (not per step), and counted flushes."""

import contextlib
import logging
import sys

import pytest
import torch
import torch.nn.functional as F

from nkipy_core import (
    cache_stats,
    eager_stats,
    init_nkipy_backend,
    kernel_stats,
    reset_kernel_stats,
)
from nkipy_core.buffers import memory
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.device import fusion
from nkipy_core.errors import DeviceError


@contextlib.contextmanager
def per_op_eager():
    """One kernel per op: what ``torch.use_deterministic_algorithms(True)`` asks for."""
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


def same(got: torch.Tensor, want: torch.Tensor) -> None:
    """Fused equals per-op: bit for bit on the ``cpu`` runtime; XLA's code generator contracts a
    multiply and a neighbouring add into one fused multiply-add, an ulp apart."""
    if memory.runtime().name == "cpu":
        assert torch.equal(got, want), (got, want)
    else:
        half = got.dtype in (torch.float16, torch.bfloat16)
        torch.testing.assert_close(got, want, rtol=1e-2 if half else 1e-6, atol=1e-6)


def launches() -> int:
    return sum(s.calls for s in kernel_stats())


def flushes(why: str | None = None) -> int:
    return cache_stats["eager_flushes" if why is None else f"eager_flush:{why}"]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


def _train(steps: int, read_loss: bool = True):
    """``steps`` AdamW steps of an MLP on the device; the losses and the final weights."""
    torch.manual_seed(0)
    model = MLP().to("nkipy")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 16).to("nkipy"), torch.randn(8, 4).to("nkipy")
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if read_loss:
            losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_a_training_step_is_a_few_kernels_with_per_op_numbers():
    with per_op_eager():
        reset_kernel_stats()
        want_losses, want_weights = _train(3)
        per_op = launches()
    _train(3)  # compiles the step's kernels
    reset_kernel_stats()
    compiles = cache_stats["eager_fused_compiles"]
    losses, weights = _train(3)
    fused = launches()
    same(torch.tensor(losses), torch.tensor(want_losses))
    for got, want in zip(weights, want_weights, strict=True):
        same(got, want)
    # model.to, the batch, 3 x (forward+backward, optimizer step): a handful of kernels, where
    # per-op eager runs one per op
    assert fused <= 3 * 4 + 4 < per_op / 10, (fused, per_op)
    assert cache_stats["eager_fused_compiles"] == compiles  # the same graphs as before


def test_the_second_step_reuses_the_first_steps_kernels():
    _train(1)
    compiles = cache_stats["eager_fused_compiles"]
    _train(1)
    assert cache_stats["eager_fused_compiles"] == compiles


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_float_ops_round_each_result_inside_a_fused_kernel(dtype):
    torch.manual_seed(0)
    a, b, c = (torch.randn(64).to(dtype) for _ in range(3))

    def chain(a, b, c):
        return (((a * b) + c) * 1.7).exp().sum()

    with per_op_eager():
        want = chain(*(t.to("nkipy") for t in (a, b, c))).cpu()
    before = flushes()
    got = chain(*(t.to("nkipy") for t in (a, b, c))).cpu()
    assert flushes() == before + 1
    same(got, want)
    same(got, chain(a, b, c))


def test_views_in_place_ops_and_aliases_land_as_in_torch():
    def program(x):
        y = x.t()
        y[1:3].mul_(2.5)  # through a transposed view
        x.add_(1)
        z = x[:, ::2]  # a strided view, written and read
        z.copy_(z.flip(0))
        w = x.view(-1)[3:9].clone()
        x.zero_()[0] = w[:4].sum()  # an in-place op's result written through a view
        return x + w.sum(), w

    base = torch.randn(4, 6)
    on_cpu, per_op, fused = base.clone(), base.clone().to("nkipy"), base.clone().to("nkipy")
    want = program(on_cpu)
    with per_op_eager():
        exact = program(per_op)
    before = flushes()
    got = program(fused)
    assert flushes() == before  # nothing needed a value yet
    for g, e, w in zip((*got, fused), (*exact, per_op), (*want, on_cpu)):
        same(g.cpu(), e.cpu())
        torch.testing.assert_close(g.cpu(), w)


def test_random_ops_draw_the_stream_per_op_eager_draws():
    def draws():
        torch.manual_seed(3)
        x = torch.rand(5, device="nkipy")
        y = F.dropout(torch.ones(6, device="nkipy"), 0.5)
        return torch.cat([x, y, torch.randn(3, device="nkipy")]).cpu()

    with per_op_eager():
        want = draws()
    same(draws(), want)


@pytest.mark.parametrize(
    "use",
    [
        lambda t: t.cpu(),
        lambda t: t.sum().item(),
        lambda t: t.tolist(),
        lambda t: bool(t.sum() > 0),
        lambda t: t.cpu().numpy(),
        lambda t: repr(t),
        lambda t: torch.nkipy.synchronize(),
    ],
    ids=["cpu", "item", "tolist", "bool", "numpy", "print", "synchronize"],
)
def test_values_needed_on_the_host_run_the_queue(use):
    x = torch.arange(6.0).to("nkipy")
    y = x * 2 + 1
    before = flushes()
    use(y)
    assert flushes() > before
    assert torch.equal(y.cpu(), torch.arange(6.0) * 2 + 1)


def test_an_op_no_pack_lowers_runs_after_the_queued_ops_it_reads():
    x = torch.arange(6.0).to("nkipy")
    y = x * 2
    with pytest.warns(Warning, match="runs on CPU"):
        z = torch.special.gammainc(y + 1, y)  # no pack lowers it
    expected = torch.arange(6.0) * 2
    torch.testing.assert_close(z.cpu(), torch.special.gammainc(expected + 1, expected))


def test_shape_errors_raise_at_the_op_not_at_the_flush():
    a, b = torch.ones(2, 3, device="nkipy"), torch.ones(4, device="nkipy")
    with pytest.raises(RuntimeError, match="must match the size"):
        a + b


def test_deterministic_mode_and_the_switch_run_one_kernel_per_op(monkeypatch):
    x = torch.ones(4, device="nkipy")
    torch.nkipy.synchronize()
    with per_op_eager():
        before = flushes()
        (x + 1).cpu()
        assert flushes() == before
    monkeypatch.setenv("NKIPY_EAGER_FUSION", "0")
    from nkipy_core.config import settings

    settings.reset()
    assert not settings.current().eager_fusion
    before = flushes()
    (x * 3).cpu()
    assert flushes() == before


def test_the_switch_is_a_backend_setting():
    config = init_nkipy_backend(eager_fusion=False)
    assert not config.eager_fusion


def test_a_structure_that_changes_at_every_flush_goes_per_op_once(caplog):
    storms = cache_stats["eager_fusion_storms"]
    with caplog.at_level(logging.WARNING, logger="nkipy.device"):
        for n in range(1, fusion.STORM + 4):
            x = torch.ones(n, device="nkipy")
            for _ in range(n):  # a graph of n ops: new at every flush
                x = x * 2
            assert x.sum().item() == n * 2.0**n
    assert cache_stats["eager_fusion_storms"] == storms + 1
    assert sum("make a new graph at every flush" in r.message for r in caplog.records) == 1


def test_each_flush_is_a_profiler_event_naming_its_ops():
    x = torch.ones(8, device="nkipy")
    with torch.profiler.profile() as prof:
        ((x * 2).exp() + 1).cpu()
    names = [e.name for e in prof.events() if e.name.startswith("nkipy_eager_flush")]
    assert names and "aten::mul.Tensor" in names[0] and "aten::exp" in names[0], names


def test_flush_reasons_are_counted():
    x = torch.ones(8, device="nkipy")
    (x + 1).cpu()
    torch.nkipy.synchronize()
    y = x * 2
    torch.nkipy.synchronize()
    assert flushes("synchronize") >= 1
    assert flushes("a value is used outside the queue") >= 1
    assert cache_stats["eager_flushed_ops"] >= 2
    assert y.cpu().sum().item() == 16
    stats = eager_stats()  # the same counters, as nkipy-ops stats reads them
    assert stats["eager_flushes"] == flushes() and stats["eager_flush:synchronize"] >= 1


def test_an_error_in_a_queued_kernel_surfaces_at_the_next_synchronisation(monkeypatch):
    x = torch.ones(8, device="nkipy")
    torch.nkipy.synchronize()
    failing = ("eager_fused", "eager_aten::exp_default")

    def fault(real):
        def call(self, *args):
            if self.kernel_name in failing:
                raise RuntimeError("device fault")
            return real(self, *args)

        return call

    for method in ("__call__", "device_call"):
        monkeypatch.setattr(KernelCall, method, fault(getattr(KernelCall, method)))
    y = x.exp()
    line = sys._getframe().f_lineno - 1
    z = y + 1
    fusion.flush("test")  # handed to the worker: Python goes on
    with pytest.raises(DeviceError, match=rf"aten::exp.default, queued at .*test_fusion.py:{line}"):
        torch.nkipy.synchronize()
    with pytest.raises(DeviceError, match="has no value"):
        z.cpu()
    monkeypatch.undo()
    assert (x + 1).cpu().tolist() == [2.0] * 8  # the queue goes on after the error
