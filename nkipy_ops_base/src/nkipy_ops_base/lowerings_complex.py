"""Ops that exist for complex tensors: the real/complex views, conjugation and construction.

A complex tensor is traced as its real view (``complex_pairs``), so ``view_as_real`` and
``view_as_complex`` are the identity on the traced arrays: a kernel computing RoPE as TorchTitan
writes it (``view_as_complex``, a product with ``freqs_cis``, ``view_as_real``) holds real
arithmetic only. ``_conj``, a view that sets torch's conjugate bit, is a value here: kernels have
value semantics, and AOTAutograd has made graphs functional before they are lowered.
"""

from __future__ import annotations

import math

import torch

from nkipy_core import knp

from . import complex_pairs
from .rules import RULES

aten = torch.ops.aten


@RULES.register(aten.view_as_real.default, aten.view_as_complex.default, complex=True)
def view_as_real(ctx, x):
    """Both are the identity on real views."""
    return x


@RULES.register(
    aten._conj.default, aten.conj_physical.default, aten._conj_physical.default, complex=True
)
def conj(ctx, x):
    """The conjugate of a real tensor is itself."""
    return complex_pairs.conjugate(x) if ctx.complex else x


@RULES.register(aten.polar.default, complex=True)
def polar(ctx, magnitude, angle):
    """``(r cos θ, r sin θ)``, as ATen's ``polar`` computes it."""
    magnitude, angle = knp.astype(magnitude, ctx.out_dtype), knp.astype(angle, ctx.out_dtype)
    return complex_pairs.join(
        knp.multiply(magnitude, knp.cos(angle)), knp.multiply(magnitude, knp.sin(angle))
    )


@RULES.register(aten.angle.default, complex=True)
def angle(ctx, x):
    """A complex number's argument, ``atan2(imag, real)``; a real number's is π below zero,
    0 otherwise and NaN for NaN, as ATen's real ``angle``."""
    if ctx.complex:
        return knp.arctan2(x[..., complex_pairs.IMAG], x[..., complex_pairs.REAL])
    x = knp.astype(x, ctx.out_dtype)
    half_turn = knp.astype(knp.where(knp.less(x, 0), math.pi, 0.0), ctx.out_dtype)
    return knp.where(knp.isnan(x), x, half_turn)


@RULES.register(aten.complex.default, complex=True)
def complex_(ctx, real, imag):
    shape = ctx.out.shape[:-1]
    return complex_pairs.join(
        knp.broadcast_to(knp.astype(real, ctx.out_dtype), shape),
        knp.broadcast_to(knp.astype(imag, ctx.out_dtype), shape),
    )
