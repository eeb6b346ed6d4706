"""Reference models that tests and benchmarks compile: plain torch, no nkipy imports.

``QuickStartMLP`` is the model of the quick-start guide; ``LlamaBlock`` is one Llama-style
decoder layer (RMSNorm, rotary embeddings, causal self-attention, SwiGLU MLP) written the way
real model code is written, so that compiling it exercises the ops such code produces;
``LlamaModel`` stacks such layers between an embedding and an LM head. All are initialised
deterministically from a seed, independently of torch's global RNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


def _init_(module: nn.Module, seed: int) -> None:
    """Re-initialise every parameter from a private generator: linear weights uniform in
    ±1/sqrt(fan_in) (torch's default scale), other parameters 1 plus a little noise."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            noise = torch.rand(param.shape, generator=generator, dtype=torch.float32) * 2 - 1
            if param.dim() == 2:
                param.copy_(noise / math.sqrt(param.shape[1]))
            else:
                param.copy_(1 + 0.1 * noise)


class QuickStartMLP(nn.Module):
    """``Linear -> SiLU -> Linear``, the model of the quick-start guide."""

    def __init__(self, features: int = 64, hidden: int = 128, *, seed: int = 0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, hidden), nn.SiLU(), nn.Linear(hidden, features)
        )
        _init_(self, seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@dataclass(frozen=True)
class LlamaConfig:
    hidden: int = 64
    heads: int = 4
    seq: int = 16
    intermediate: int = 128
    batch: int = 2
    eps: float = 1e-6
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in f32, as Llama does: ``w * x / sqrt(mean(x²) + eps)``."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaBlock(nn.Module):
    """One pre-norm decoder layer: ``x + attn(norm(x))`` then ``h + mlp(norm(h))``.

    ``sdpa=True`` computes attention with ``F.scaled_dot_product_attention(is_causal=True)``;
    otherwise it is written out: scores, an explicit causal mask, softmax in f32, weighted sum.
    The rotary tables are computed in ``forward`` from positions, as Llama implementations do.
    """

    inv_freq: torch.Tensor  # a buffer

    def __init__(self, config: LlamaConfig | None = None, *, sdpa: bool = False, seed: int = 0):
        super().__init__()
        self.config = config = config or LlamaConfig()
        self.sdpa = sdpa
        h, i = config.hidden, config.intermediate
        self.input_norm = RMSNorm(h, config.eps)
        self.q_proj = nn.Linear(h, h, bias=False)
        self.k_proj = nn.Linear(h, h, bias=False)
        self.v_proj = nn.Linear(h, h, bias=False)
        self.o_proj = nn.Linear(h, h, bias=False)
        self.post_attention_norm = RMSNorm(h, config.eps)
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)
        inv_freq = 1.0 / config.rope_theta ** (
            torch.arange(0, config.head_dim, 2, dtype=torch.float32) / config.head_dim
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        _init_(self, seed)

    def example_input(self, dtype: torch.dtype = torch.float32, *, seed: int = 0) -> torch.Tensor:
        c = self.config
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(c.batch, c.seq, c.hidden, generator=generator).to(dtype)

    def rotary(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(x.shape[1], device=x.device, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        n, d = self.config.heads, self.config.head_dim
        q = self.q_proj(x).view(b, s, n, d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, n, d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, n, d).transpose(1, 2)
        cos, sin = self.rotary(x)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d)
            causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(probs, v)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, n * d))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.input_norm(x))
        return h + self.mlp(self.post_attention_norm(h))


class LlamaModel(nn.Module):
    """A Llama decoder: token embedding, ``layers`` ``LlamaBlock``s (an ``nn.ModuleList``, as
    Llama implementations hold them), a final RMSNorm and the LM head; returns the logits."""

    def __init__(
        self,
        layers: int = 2,
        config: LlamaConfig | None = None,
        *,
        vocab: int = 256,
        sdpa: bool = False,
        seed: int = 0,
    ):
        super().__init__()
        self.config = config = config or LlamaConfig()
        self.vocab = vocab
        self.embed_tokens = nn.Embedding(vocab, config.hidden)
        self.layers = nn.ModuleList(LlamaBlock(config, sdpa=sdpa) for _ in range(layers))
        self.norm = RMSNorm(config.hidden, config.eps)
        self.lm_head = nn.Linear(config.hidden, vocab, bias=False)
        _init_(self, seed)

    def example_input(self, *, seed: int = 0) -> torch.Tensor:
        c = self.config
        generator = torch.Generator().manual_seed(seed)
        return torch.randint(0, self.vocab, (c.batch, c.seq), generator=generator)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(ids)
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(self.norm(h))
