"""The ``auto`` runtime: a kernel runs on the ``cpu`` runtime until it has spent
``NKIPY_AUTO_PAYBACK`` seconds there, is then compiled for XLA and tried on both, and stays on the
faster. Every call along the way returns eager's result; which runtime is faster is not asserted
(no timing in tests): the choice is forced through ``faster`` where a test needs one side."""

from __future__ import annotations

import logging
from importlib.metadata import version

import nkipy_cli
import numpy as np
import pytest
import torch

from nkipy_core.ir import DType, KernelBuilder, TensorType
from nkipy_core.plugin import manager as plugins
from nkipy_core.runtime import CompileOptions
from nkipy_runtime import auto_runtime

pytest.importorskip("jax", reason="the auto runtime needs the nkipy-runtime[xla] extra")


@pytest.fixture
def auto(monkeypatch):
    """The registered ``auto`` runtime, its decisions of this test only, and a count of the
    calls each of its runtimes ran."""
    runtime = plugins.get().runtimes.get("auto")
    monkeypatch.setattr(runtime, "routing", [])
    runs = {"cpu": 0, "xla": 0}
    for side in ("cpu", "xla"):
        inner = getattr(runtime, side)
        for method in ("run_host", "run_host_into"):
            original = getattr(inner, method, None)
            if original is not None:
                monkeypatch.setattr(inner, method, _counting(original, runs, side))
    runtime.runs = runs
    return runtime


def _counting(method, runs, side):
    def counted(*args):
        runs[side] += 1
        return method(*args)

    return counted


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))


def test_a_kernel_stays_on_the_cpu_runtime_until_it_has_paid_for_an_xla_compile(auto, monkeypatch):
    monkeypatch.setenv("NKIPY_AUTO_PAYBACK", "3600")
    model, x = _mlp(), torch.randn(4, 16)
    f = torch.compile(model, backend="nkipy", options={"runtime": "auto"})
    with torch.no_grad():
        for _ in range(5):
            torch.testing.assert_close(f(x), model(x))
    assert auto.runs == {"cpu": 5, "xla": 0}
    assert auto.routing == []


@pytest.mark.parametrize("winner", ["cpu", "xla"])
def test_a_hot_kernel_is_tried_on_both_runtimes_and_stays_on_the_faster(
    auto, monkeypatch, caplog, winner
):
    monkeypatch.setenv("NKIPY_AUTO_PAYBACK", "0")
    chosen = []
    monkeypatch.setattr(auto_runtime, "faster", lambda c, x: chosen.append((c, x)) or winner)
    model, x = _mlp(), torch.randn(4, 16)
    f = torch.compile(model, backend="nkipy", options={"runtime": "auto"})
    trial = 2 * auto_runtime.TRIAL_CALLS + 1  # and one first XLA call, not timed
    with torch.no_grad(), caplog.at_level(logging.INFO, "nkipy.runtime.auto"):
        for _ in range(1 + trial + 4):
            torch.testing.assert_close(f(x), model(x))
    assert auto.runs == {
        "cpu": 1 + auto_runtime.TRIAL_CALLS + (4 if winner == "cpu" else 0),
        "xla": auto_runtime.TRIAL_CALLS + 1 + (4 if winner == "xla" else 0),
    }
    (routing,) = auto.routing
    assert routing.runtime == winner and routing.reason == ""
    assert (routing.cpu_seconds, routing.xla_seconds) == chosen[0]
    assert routing.xla_compile_seconds > 0
    assert f"runs on {winner} (" in caplog.text and "compiled for xla in" in caplog.text


def test_updated_inputs_are_written_on_either_runtime(auto, monkeypatch):
    """A compiled optimizer step updates its parameters and states in place: the cpu kernel
    writes them where they lie, an XLA call's results are copied in. Eight steps through the
    payback, the trial and XLA match eager's."""
    monkeypatch.setenv("NKIPY_AUTO_PAYBACK", "0")
    monkeypatch.setattr(auto_runtime, "faster", lambda c, x: "xla")
    torch.manual_seed(0)
    params = [torch.randn(8, 4), torch.randn(4)]
    grads = [torch.randn_like(p) for p in params]
    ours = [p.clone().requires_grad_() for p in params]
    theirs = [p.clone().requires_grad_() for p in params]
    opt_ours = torch.optim.SGD(ours, lr=0.1, momentum=0.9)
    opt_theirs = torch.optim.SGD(theirs, lr=0.1, momentum=0.9)
    step = torch.compile(opt_ours.step, backend="nkipy", options={"runtime": "auto"})
    for _ in range(12):
        for p, q, g in zip(ours, theirs, grads, strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        step()
        opt_theirs.step()
        for p, q in zip(ours, theirs, strict=True):
            torch.testing.assert_close(p, q)
    assert auto.runs["xla"] > auto_runtime.TRIAL_CALLS + 1  # it ran on XLA after the trial
    # the first step's graph (which makes the momentum buffers) ran once: still on trial
    assert [(r.runtime, r.reason) for r in auto.routing] == [("cpu", "on trial"), ("xla", "")]


def test_a_kernel_xla_refuses_stays_on_the_cpu_runtime(auto, monkeypatch, caplog):
    monkeypatch.setenv("NKIPY_AUTO_PAYBACK", "0")

    def refuse(kernel, options):
        raise RuntimeError("no such op")

    monkeypatch.setattr(auto.xla, "compile", refuse)
    model, x = _mlp(), torch.randn(4, 16)
    f = torch.compile(model, backend="nkipy", options={"runtime": "auto"})
    with torch.no_grad(), caplog.at_level(logging.WARNING, "nkipy.runtime.auto"):
        for _ in range(4):
            torch.testing.assert_close(f(x), model(x))
    assert auto.runs == {"cpu": 4, "xla": 0}
    (routing,) = auto.routing
    assert routing.runtime == "cpu" and routing.reason == "XLA: no such op"
    assert "stays on the cpu runtime: XLA: no such op" in caplog.text


def test_a_kernel_with_a_collective_never_moves(monkeypatch):
    """A collective inside a kernel runs between the processes of the group, which only the cpu
    runtime does: such a kernel is decided at once, without a trial."""
    monkeypatch.setenv("NKIPY_AUTO_PAYBACK", "0")
    runtime = auto_runtime.AutoRuntime()
    kb = KernelBuilder("reduced")
    x = kb.param(TensorType((4,), DType.f32))
    kernel = kb.finish([kb.emit("all_reduce", [x], {"op": "sum", "groups": ((0,),)})])
    executable = runtime.compile(kernel, CompileOptions())
    assert executable.decided == "cpu"
    assert "collectives or custom calls" in executable.routing.reason
    data = np.arange(4, dtype=np.float32)
    (out,) = runtime.run_host(executable, [data])
    np.testing.assert_array_equal(out, data)  # a group of one: the identity
    assert executable.xla is None and runtime.routing == []


def test_auto_ranks_below_cpu_and_the_doctor_says_what_it_does(capsys):
    code, out, _ = nkipy_cli.run(capsys, "doctor")
    assert code == 0
    assert nkipy_cli.line_of(out, "auto ")[:6] == [
        "auto",
        "-5",
        "nkipy-runtime",
        version("nkipy-runtime"),
        "no",
        "yes",
    ]
    assert "Runtime 'auto': cpu first; a kernel that has run 1 s there is compiled for xla" in out


def test_xla_must_win_clearly_to_take_a_kernel():
    """Part of an XLA call's cost falls outside it (its results are new memory at every call),
    so a near tie stays on the cpu runtime."""
    assert auto_runtime.faster(1.0, 0.8) == "xla"
    assert auto_runtime.faster(1.0, 0.95) == "cpu"
    assert auto_runtime.faster(1.0, 1.2) == "cpu"
