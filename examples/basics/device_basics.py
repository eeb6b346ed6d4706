"""The nkipy device: tensors and modules on it, eager ops through the op packs, saving.

    python examples/basics/device_basics.py

On a Neuron host, or with ``NKIPY_RUNTIME`` set, torch has the device from ``import torch`` on;
elsewhere a program asks for it (``nkipy_core.register_device()``), so that installing nkipy
changes nothing for programs that do not.
"""

import io

import torch

import nkipy_core


def main() -> int:
    nkipy_core.register_device()  # here the cpu runtime backs it
    torch.manual_seed(0)
    x = torch.randn(2, 3)
    d = x.to("nkipy")  # a host-to-device copy into a buffer owned by the runtime
    print(d)
    # asked for, it is torch's accelerator too (device-generic code picks it)
    print("device:", d.device, "| torch.accelerator picks it:", torch.accelerator.is_available())

    # eager ops run as cached single-op kernels lowered by the installed packs
    y = (d @ d.t()).softmax(-1) * 2 + 1
    expected = (x @ x.t()).softmax(-1) * 2 + 1
    print("eager ops match CPU:", torch.allclose(y.cpu(), expected, atol=1e-6))
    print("item:", round(d.sum().item(), 4), "| tolist:", [round(v, 4) for v in d[0].tolist()])

    # modules: parameters and buffers move; state dicts and torch.save round trip
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).to("nkipy")
    print(
        "parameters on:",
        {p.device.type for p in model.parameters()},
        "| buffers on:",
        {b.device.type for b in model.buffers()},
    )
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer)
    model.load_state_dict(state)
    print("loaded state dict on:", {t.device.type for t in state.values()})
    print(
        "memory allocated:",
        torch.nkipy.memory_allocated(),
        "bytes | transfers:",
        torch.nkipy.transfer_stats(),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
