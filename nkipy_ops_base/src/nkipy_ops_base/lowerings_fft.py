"""Fourier transforms: ATen's ``_fft_c2c``, ``_fft_r2c`` and ``_fft_c2r``, which every
``torch.fft`` function, ``stft`` and ``istft`` (and their gradients) reach.

Each is a sequence of one-dimensional transforms by matrix products (``dft``), one per entry of
``dim``; the normalisation (0: none, 1: ``1/sqrt(n)``, 2: ``1/n``, with ``n`` the product of
the signal sizes) is folded into the matrices. ``r2c`` transforms the last of ``dim`` from real
to complex (its first ``n // 2 + 1`` outputs if ``onesided``) and the others complex to complex;
``c2r`` transforms all but the last of ``dim`` complex to complex, then the last to a real signal
of ``last_dim_size``, as pocketfft orders them.
"""

from __future__ import annotations

import math

import torch

from nkipy_core import knp

from . import dft
from .rules import RULES

aten = torch.ops.aten


def _scale(normalization: int, n: int) -> float:
    """One dimension's share of the normalisation of a transform with signal size ``n`` there."""
    return (1.0, 1 / math.sqrt(n), 1 / n)[normalization]


@RULES.register(aten._fft_c2c.default, complex=True)
def fft_c2c(ctx, x, dim, normalization, forward):
    x = knp.astype(x, ctx.out_dtype)
    for d in dim:
        d %= x.ndim - 1
        x = dft.c2c(x, d, -1 if forward else 1, _scale(normalization, x.shape[d]))
    return x


@RULES.register(aten._fft_r2c.default, complex=True)
def fft_r2c(ctx, x, dim, normalization, onesided):
    x = knp.astype(x, ctx.out_dtype)
    *others, last = (d % x.ndim for d in dim)
    n = x.shape[last]
    x = dft.r2c(x, last, n // 2 + 1 if onesided else n, _scale(normalization, n))
    for d in others:
        x = dft.c2c(x, d, -1, _scale(normalization, x.shape[d]))
    return x


@RULES.register(aten._fft_c2r.default, complex=True)
def fft_c2r(ctx, x, dim, normalization, last_dim_size):
    x = knp.astype(x, ctx.out_dtype)
    *others, last = (d % (x.ndim - 1) for d in dim)
    for d in others:
        x = dft.c2c(x, d, 1, _scale(normalization, x.shape[d]))
    return dft.c2r(x, last, last_dim_size, _scale(normalization, last_dim_size))
