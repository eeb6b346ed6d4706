"""Matrix products: ``mm``, ``bmm``, ``addmm``, ``addmv``, ``dot``, ``mv``.

All are ``knp.matmul`` in torch's opmath: half floats multiply and accumulate in f32 and round
once, which is what torch's CPU GEMMs do. ``addmm`` and ``addmv`` ignore ``self`` when
``beta == 0`` (so NaNs in it do not propagate), as ATen documents.
"""

from __future__ import annotations

import torch

from nkipy_core import knp

from .opmath import opmath
from .rules import RULES

aten = torch.ops.aten


@RULES.register(aten.mm.default, aten.bmm.default, aten.dot.default, aten.mv.default)
def matmul(ctx, x, other):
    return opmath(ctx.out_dtype, knp.matmul, x, other)


@RULES.register(aten.addmm.default, aten.addmv.default)
def addmm(ctx, bias, mat, other, *, beta=1, alpha=1):
    """``beta · bias + alpha · (mat @ other)`` for a matrix or vector ``other``."""
    def fn(c, a, b):
        product = knp.matmul(a, b)
        product = product if alpha == 1 else knp.multiply(product, alpha)
        if beta == 0:
            return knp.broadcast_to(product, ctx.out.shape)
        return knp.add(c if beta == 1 else knp.multiply(c, beta), product)

    return opmath(ctx.out_dtype, fn, bias, mat, other)
