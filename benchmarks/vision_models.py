"""Four image classifiers in plain PyTorch, for ``bench_vision.py``: ResNet-18, ConvNeXt-T,
ViT-B/16 and EfficientNet-B0, with the layer structure of their papers (and of torchvision's and
timm's versions), randomly initialised.

They are written here because this repository's torch has no matching torchvision build; what
the benchmark needs of them is their mix of ops (dense and depthwise convolutions, batch and
layer norms, GELU and SiLU, squeeze-excitation, attention), not trained weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)
    )


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.a, self.b = _conv_bn(cin, cout, 3, stride), _conv_bn(cout, cout, 3)
        self.skip = _conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.b(F.relu(self.a(x))) + self.skip(x))


def resnet18(classes: int) -> nn.Module:
    layers: list[nn.Module] = [_conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [_BasicBlock(cin, cout, stride), _BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes))


class _ChannelsLayerNorm(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class _ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        y = self.gamma * self.down(F.gelu(self.up(y)))
        return x + y.permute(0, 3, 1, 2)


def convnext_tiny(classes: int) -> nn.Module:
    dims, depths = (96, 192, 384, 768), (3, 3, 9, 3)
    layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, 4), _ChannelsLayerNorm(dims[0], eps=1e-6)]
    for i, (dim, depth) in enumerate(zip(dims, depths)):
        if i:
            layers += [_ChannelsLayerNorm(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)]
        layers += [_ConvNeXtBlock(dim) for _ in range(depth)]
    head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(dims[-1], eps=1e-6)]
    return nn.Sequential(*layers, *head, nn.Linear(dims[-1], classes))


class _ViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(attended)
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """ViT-B/16: 16x16 patches, width 768, 12 blocks of 12 heads, a class token."""

    def __init__(self, classes: int, image: int, dim: int = 768, depth: int = 12) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (image // 16) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*(_ViTBlock(dim, 12) for _ in range(depth)))
        self.norm, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], 1) + self.pos
        return self.head(self.norm(self.blocks(tokens))[:, 0])


class _MBConv(nn.Module):
    """Inverted residual: 1x1 expansion, depthwise kxk, squeeze-excitation, 1x1 projection."""

    def __init__(self, cin: int, cout: int, expand: int, k: int, stride: int) -> None:
        super().__init__()
        mid = cin * expand
        self.expand = (
            nn.Sequential(_conv_bn(cin, mid, 1), nn.SiLU()) if expand != 1 else nn.Identity()
        )
        self.dw = _conv_bn(mid, mid, k, stride, groups=mid)
        squeeze = max(1, cin // 4)
        self.se = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(mid, squeeze, 1),
            nn.SiLU(),
            nn.Conv2d(squeeze, mid, 1),
        )
        self.project = _conv_bn(mid, cout, 1)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.silu(self.dw(self.expand(x)))
        y = self.project(y * torch.sigmoid(self.se(y)))
        return x + y if self.residual else y


def efficientnet_b0(classes: int) -> nn.Module:
    stages = (  # expansion, kernel, stride, channels, repeats
        (1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
        (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1),
    )  # fmt: skip
    layers: list[nn.Module] = [_conv_bn(3, 32, 3, 2), nn.SiLU()]
    cin = 32
    for expand, k, stride, cout, repeats in stages:
        for i in range(repeats):
            layers.append(_MBConv(cin, cout, expand, k, stride if i == 0 else 1))
            cin = cout
    layers += [_conv_bn(cin, 1280, 1), nn.SiLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return nn.Sequential(*layers, nn.Linear(1280, classes))


def build(name: str, classes: int, image: int) -> nn.Module:
    """A model of this module by its benchmark name."""
    if name == "vit_b_16":
        return ViT(classes, image)
    return {
        "resnet18": resnet18,
        "convnext_tiny": convnext_tiny,
        "efficientnet_b0": efficientnet_b0,
    }[name](classes)


NAMES = ("resnet18", "convnext_tiny", "vit_b_16", "efficientnet_b0")
