"""Train a small MLP eagerly on the nkipy device and on CPU, and compare.

    python examples/basics/training.py

Forward, ``backward()`` and the optimizer step all run on the device: each ATen op is a cached
single-op kernel lowered by the installed packs (optimizers use torch's foreach ops, which come
back to the device one tensor at a time).
"""

import copy

import torch

import nkipy_core


def train(model, x, y, optimizer_cls, steps=5):
    optimizer = optimizer_cls(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main() -> int:
    nkipy_core.register_device()  # not needed on Trainium or with NKIPY_RUNTIME set
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(16, 8), torch.randn(16, 4)
    ok = True
    for optimizer_cls in (torch.optim.SGD, torch.optim.AdamW):
        cpu_model, device_model = copy.deepcopy(model), copy.deepcopy(model).to("nkipy")
        cpu_losses = train(cpu_model, x, y, optimizer_cls)
        device_losses = train(device_model, x.to("nkipy"), y.to("nkipy"), optimizer_cls)
        same = torch.allclose(
            torch.tensor(device_losses), torch.tensor(cpu_losses), atol=1e-5
        ) and all(
            torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5)
            for p, q in zip(device_model.parameters(), cpu_model.parameters())
        )
        ok &= same
        print(
            f"{optimizer_cls.__name__}: losses {[round(v, 4) for v in device_losses]}; "
            f"losses and parameters match CPU: {same}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
