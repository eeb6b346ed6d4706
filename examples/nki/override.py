"""NKI kernels overriding ATen ops: softmax and RMSNorm in a small attention-style block.

    python examples/nki/override.py

With nkipy-ops-nki installed and ``NKIPY_NKI_OVERRIDES=1`` (set below: the overrides are opt-in
while they run on the host interpreter), ``aten::_softmax`` over the last dimension lowers to the pack's NKI
softmax kernel (priority 10, above nkipy-ops-base), and the RMSNorm pattern becomes the pack's
NKI RMSNorm op; shapes the kernels do not tile fall through to the base rules. The output matches
eager, and the kernel file shows the two custom calls.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("NKIPY_NKI_OVERRIDES", "1")  # before nkipy loads its plugins

import torch  # noqa: E402 - after the switch above

import nkipy_core
from nkipy_core import init_nkipy_backend


class Block(torch.nn.Module):
    def __init__(self, dim: int = 64):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(dim) + 0.5)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, h):
        var = h.pow(2).mean(-1, keepdim=True)  # RMSNorm, as LlamaRMSNorm writes it
        h = self.weight * (h * torch.rsqrt(var + 1e-6))
        scores = h @ h.transpose(-1, -2) / 8.0
        return torch.softmax(scores, dim=-1) @ self.proj(h)


def main() -> None:
    cache = Path(tempfile.mkdtemp(prefix="nkipy-nki-"))
    init_nkipy_backend(runtime="cpu", nkipy_cache=cache)
    torch.manual_seed(0)
    block, x = Block(), torch.randn(2, 100, 64)
    with torch.no_grad():
        out = torch.compile(block, backend="nkipy", fullgraph=True)(x)
        print("matches eager:", torch.allclose(out, block(x), atol=1e-5, rtol=1e-5))
    sources = "".join(p.read_text() for p in cache.glob("kernels/*/kernel.py"))
    print(
        "NKI kernels in the compiled code:",
        sorted({k for k in ("softmax_kernel", "rmsnorm_kernel") if f"{k}#" in sources}),
    )
    print(f"kernels {nkipy_core.cache_stats['lowered_kernels']}")


if __name__ == "__main__":
    main()
