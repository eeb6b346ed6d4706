"""``torch.compile(optimizer.step, backend="nkipy")``: the whole update of every parameter in
strict mode (nothing left on CPU), the parameters and states as eager's after a few steps."""

from __future__ import annotations

import copy

import pytest
import torch


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


OPTIMIZERS = {
    "AdamW": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
    "Adam-amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True),
    "SGD-momentum": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_compiled_optimizer_step_matches_eager(name):
    model = _model()
    reference = copy.deepcopy(model)
    optimizer, eager = (
        OPTIMIZERS[name](model.parameters()),
        OPTIMIZERS[name](reference.parameters()),
    )
    step = torch.compile(optimizer.step, backend="nkipy", options={"strict": True})
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))
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
