"""Quick start: a small MLP compiled with the nkipy backend on the `cpu` runtime.

    python examples/quickstart.py

Prints the compiled output, whether it matches eager PyTorch, and where the kernel went.
"""

import logging

import torch

from nkipy_core import cache_stats, init_nkipy_backend


def main() -> int:
    init_nkipy_backend(nkipy_cache="./nkipy_cache", log_level=logging.WARNING, runtime="cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.SiLU(), torch.nn.Linear(128, 64))
    x = torch.randn(8, 64)

    compiled = torch.compile(model, backend="nkipy")
    out = compiled(x)
    expected = model(x)

    print("output[0, :4]:", [round(v, 4) for v in out[0, :4].tolist()])
    matches = torch.allclose(out, expected, rtol=1e-4, atol=1e-5)
    print(f"matches eager: {matches} (max abs diff {(out - expected).abs().max().item():.2e})")
    print(
        f"kernels compiled: {cache_stats['compiled_kernels']}, loaded from cache: {cache_stats['hits']}, "
        f"ops that fell back to CPU: {cache_stats['fallback_ops']}"
    )
    print("kernel cache: ./nkipy_cache (see kernels/*/kernel.py for the generated NumPy code)")
    return 0 if matches else 1


if __name__ == "__main__":
    raise SystemExit(main())
