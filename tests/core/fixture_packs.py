"""Small in-process op packs used by the core tests (what a third party would ship)."""

import types

import torch

from nkipy_core import RuleSet, Unsupported, hookimpl, knp

aten = torch.ops.aten


def pack(rules: RuleSet, **hooks) -> types.SimpleNamespace:
    """A plugin object whose lowering hook installs ``rules`` (plus any extra hook functions)."""

    @hookimpl
    def nkipy_register_lowerings(registry):
        rules.install(registry)

    return types.SimpleNamespace(nkipy_register_lowerings=nkipy_register_lowerings, **hooks)


def arithmetic_rules(priority: int = 0) -> RuleSet:
    rules = RuleSet(priority=priority)

    @rules.register(aten.add.Tensor)
    def add(ctx, x, y, *, alpha=1):
        return knp.astype(knp.add(x, knp.multiply(y, alpha) if alpha != 1 else y), ctx.out_dtype)

    @rules.register(aten.mul.Tensor)
    def mul(ctx, x, y):
        return knp.astype(knp.multiply(x, y), ctx.out_dtype)

    @rules.register(aten.exp.default)
    def exp(ctx, x):
        return knp.exp(x)

    @rules.register(aten.mean.dim)
    def mean(ctx, x, dims, keepdim=False, *, dtype=None):
        return knp.mean(x, axis=dims, keepdims=keepdim)

    return rules


def declining_rules(priority: int) -> RuleSet:
    """Declines every exp: the lower-priority provider must take the node."""
    rules = RuleSet(priority=priority)

    @rules.register(aten.exp.default)
    def exp_only_big(ctx, x):
        raise Unsupported("only lowers tensors with more than a million elements")

    return rules


def wrong_shape_rules() -> RuleSet:
    rules = RuleSet(priority=50)

    @rules.register(aten.exp.default)
    def exp_wrong_shape(ctx, x):
        return knp.sum(knp.exp(x), axis=0)

    return rules
