"""Rotary position embeddings as TorchTitan's Llama 3 writes them: complex ``freqs_cis`` (a model
buffer made by ``torch.polar``), queries and keys viewed as complex, multiplied, viewed as real."""

from __future__ import annotations

import torch


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)  # complex64


def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    ndim = x.ndim
    seqlen = x.shape[1]
    freqs_cis = freqs_cis[0:seqlen]
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(
    xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class Rotary(torch.nn.Module):
    """``apply_rotary_emb`` with ``freqs_cis`` as a (non-persistent) buffer, as in the model."""

    def __init__(self, head_dim: int, max_seqlen: int):
        super().__init__()
        self.register_buffer(
            "freqs_cis", precompute_freqs_cis(head_dim, max_seqlen), persistent=False
        )

    def forward(self, xq: torch.Tensor, xk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return apply_rotary_emb(xq, xk, self.freqs_cis)


def inputs(
    batch: int = 2, seqlen: int = 6, heads: int = 3, head_dim: int = 8, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shape = (batch, seqlen, heads, head_dim)
    return torch.randn(shape, generator=g), torch.randn(shape, generator=g)
