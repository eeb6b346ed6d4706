"""The plugin module of nkipy-ops-example: one lowering rule, installed from one hook."""

import torch

from nkipy_core import RuleSet, hookimpl, knp
from nkipy_core.ir import DType

#: the nkipy hook API versions this pack works with (nkipy_core.plugin.hook_api)
NKIPY_HOOK_API = ">=1.0,<2"

rules = RuleSet()  # priority 0, like nkipy-ops-base: this pack adds an op, it overrides nothing


@rules.register(torch.ops.aten.softplus.default)
def softplus(ctx, x, beta=1, threshold=20):
    """torch's formula: ``x`` where ``beta * x > threshold``, else ``log1p(exp(beta * x)) / beta``."""
    dtype = knp.dtype_of(x)
    v = (
        knp.astype(x, DType.f32) if dtype.is_half else x
    )  # torch computes bf16/f16 in f32, rounds once
    bx = knp.multiply(v, beta)
    out = knp.where(knp.greater(bx, threshold), v, knp.divide(knp.log1p(knp.exp(bx)), beta))
    return knp.astype(out, dtype)


@hookimpl
def nkipy_register_lowerings(registry):
    rules.install(registry)
