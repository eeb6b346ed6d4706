"""``torch.compile(optimizer.step, backend="nkipy")``: the whole update of every parameter in
strict mode (nothing left on CPU), the parameters and states as eager's after a few steps."""

from __future__ import annotations

import copy

import pytest
import torch

from nkipy_core.compiler import kernel_call


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


OPTIMIZERS = {
    "AdamW": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
    "Adam-amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True),
    "SGD-momentum": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True),
}


def _train_and_compare(model, make_optimizer, x):
    """Three steps of ``model`` with ``make_optimizer``'s step compiled by nkipy, and of a copy
    with it eager; the parameters and states are checked equal. Returns the compiled one's
    parameters' data pointers before and after."""
    reference = copy.deepcopy(model)
    optimizer, eager = make_optimizer(model.parameters()), make_optimizer(reference.parameters())
    step = torch.compile(optimizer.step, backend="nkipy", options={"strict": True})
    before = [p.data_ptr() for p in model.parameters()]
    for _ in range(3):
        for m, opt in ((model, optimizer), (reference, eager)):
            opt.zero_grad()
            m(x).square().mean().backward()
        step()
        eager.step()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q)
        for key, value in eager.state[q].items():
            torch.testing.assert_close(optimizer.state[p][key], value)
    return before, [p.data_ptr() for p in model.parameters()]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_compiled_optimizer_step_matches_eager(name):
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))
    _train_and_compare(_model(), OPTIMIZERS[name], x)


def test_parameters_and_states_are_updated_where_they_lie():
    """The kernel's new parameters and states are left in the tensors the step updates (the
    graph's ``copy_`` back taken into the kernel call); on the ``cpu`` runtime the kernel
    writes the 256 KiB weight and its states there itself, without a new array."""
    torch.manual_seed(0)
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(1))
    earlier = set(kernel_call._LIVE)
    before, after = _train_and_compare(
        torch.nn.Linear(256, 256),
        lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
        x,
    )
    assert after == before
    (call,) = set(kernel_call._LIVE) - earlier
    # of the weight and the bias: the parameter, exp_avg, exp_avg_sq and the step count
    assert len(call.boundary.writes) == 8
    if call.runtime.name == "cpu":  # the weight and its two states: 256 KiB each
        assert call.executable.written_in_place == 3 * 3
