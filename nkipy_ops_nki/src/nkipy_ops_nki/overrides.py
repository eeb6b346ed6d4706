"""The pack's own NKI kernels as lowerings of ATen ops, outranking nkipy-ops-base.

``aten::_softmax`` over the last dimension becomes a custom call to ``kernels.softmax``. RMSNorm has
no ATen op: ``rmsnorm_pass`` finds its pattern in the graph and puts the ``nkipy_nki::rms_norm`` op
(``kernels.rmsnorm``) in its place. Shapes a kernel does not tile decline with ``Unsupported``,
so the base rule lowers them as before.
"""

from __future__ import annotations

import math

import torch

from nkipy_core import RuleSet, Unsupported, knp
from nkipy_core.ir import TensorType

from . import custom_call
from .capture import Launch
from .custom_op import nki_op
from .kernel import NKIKernel
from .kernels import rmsnorm, softmax

#: above nkipy-ops-base's rules (priority 0)
OVERRIDE_PRIORITY = 10

rules = RuleSet(priority=OVERRIDE_PRIORITY)

SOFTMAX = NKIKernel(softmax.softmax_kernel)

rms_norm = nki_op("nkipy_nki::rms_norm")(rmsnorm.rmsnorm_kernel)


def _rows(shape: tuple[int, ...]) -> tuple[int, int]:
    return math.prod(shape[:-1]), shape[-1]


@rules.register(torch.ops.aten._softmax.default)
def softmax_over_the_last_dimension(ctx, x, dim, half_to_float):
    shape = x.shape
    if half_to_float or not shape or dim % len(shape) != len(shape) - 1:
        raise Unsupported(
            "the NKI softmax kernel computes over the last dimension, in the input's dtype"
        )
    rows, cols = _rows(shape)
    reason = softmax.supports((rows, cols), x.dtype)
    if reason:
        raise Unsupported(f"the NKI softmax kernel: {reason}")
    launch = Launch(SOFTMAX, (), (("input", 0),), ("returned", 0))
    flat = TensorType((rows, cols), ctx.out_dtype)
    return knp.reshape(
        custom_call.lower(launch, "aten::_softmax", [knp.reshape(x, (rows, cols))], flat), shape
    )
