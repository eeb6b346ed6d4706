"""Elementwise ATen ops."""

import torch

from nkipy_core import knp

from .rules import RULES

aten = torch.ops.aten


@RULES.register(aten.add.Tensor)
def add(ctx, x, y, *, alpha=1):
    return knp.astype(knp.add(x, y if alpha == 1 else knp.multiply(y, alpha)), ctx.out_dtype)


@RULES.register(aten.mul.Tensor)
def mul(ctx, x, y):
    return knp.astype(knp.multiply(x, y), ctx.out_dtype)


@RULES.register(aten.sigmoid.default)
def sigmoid(ctx, x):
    return knp.sigmoid(x)


@RULES.register(aten.permute.default)
def permute(ctx, x, dims):
    return knp.transpose(x, dims)


@RULES.register(aten.addmm.default)
def addmm(ctx, bias, a, b, *, beta=1, alpha=1):
    return knp.add(knp.multiply(bias, beta) if beta != 1 else bias, knp.matmul(a, b) if alpha == 1 else knp.multiply(knp.matmul(a, b), alpha))
