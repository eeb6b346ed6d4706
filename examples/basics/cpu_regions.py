"""Fine-grained control inside a compiled model: a CPU region, a kernel boundary and a
``torch.compiler.disable`` function.

    python examples/basics/cpu_regions.py
"""

import torch

import nkipy_core
from nkipy_core import kernel_boundary, on_cpu


@torch.compiler.disable
def log_stats(t):
    """Not compiled: dynamo breaks the graph here and runs this eagerly (on the device)."""
    return t.mean()


def block(x):
    h = torch.sin(x) @ x.t()
    with on_cpu():  # these ops run as torch on CPU, even though a pack lowers them
        h = torch.exp(h - h.amax(-1, keepdim=True))
    h = kernel_boundary(h)  # ops before and after go to separate kernels
    return torch.tanh(h) * 2, log_stats(h)


def main() -> int:
    nkipy_core.register_device()  # not needed on Trainium or with NKIPY_RUNTIME set
    torch.manual_seed(0)
    x = torch.randn(8, 8)
    expected, expected_mean = block(x)
    out, mean = torch.compile(block, backend="nkipy")(x.to("nkipy"))
    print("output device:", out.device)
    print(
        "matches CPU:",
        torch.allclose(out.cpu(), expected, atol=1e-5)
        and torch.allclose(mean.cpu(), expected_mean, atol=1e-6),
    )
    print("kernels compiled (graphs and eager ops):", nkipy_core.cache_stats["compiled_kernels"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
