"""A hybrid program: two compiled Linear modules on nkipy with a CPU SiLU between them.

    python examples/basics/hybrid.py

The first module's output comes to the host with ``.cpu()``, SiLU runs as plain torch on CPU,
and ``.to("nkipy")`` puts the result back for the second compiled module.
"""

import torch

import nkipy_core


def main() -> int:
    nkipy_core.register_device()  # not needed on Trainium or with NKIPY_RUNTIME set
    torch.manual_seed(0)
    first, second = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)
    x = torch.randn(4, 16)
    expected = second(torch.nn.functional.silu(first(x)))

    first.to("nkipy")
    second.to("nkipy")
    compiled_first = torch.compile(first, backend="nkipy")
    compiled_second = torch.compile(second, backend="nkipy")

    hidden = compiled_first(x.to("nkipy"))  # stays on the device
    activated = torch.nn.functional.silu(hidden.cpu())  # CPU
    out = compiled_second(activated.to("nkipy"))

    print("output device:", out.device)
    print("matches CPU:", torch.allclose(out.cpu(), expected, atol=1e-5))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
