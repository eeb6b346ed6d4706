"""Convolution, forward and backward, any number of spatial dims, grouped, strided, dilated,
padded and transposed: ``convolution`` and ``convolution_backward``; and ``col2im`` (``fold``).

A convolution is a matrix product with the input's windows (``windows.im2col``); its adjoint
puts columns back (``windows.col2im``), which gives both the input gradient and the transposed
convolution. Half floats are computed in f32 and rounded once, as torch's CPU kernels do.
"""

from __future__ import annotations

import math

import torch

from nkipy_core import knp

from . import windows
from .opmath import compute_dtype, upcast
from .rules import RULES

aten = torch.ops.aten


def _per_dim(values, spatial: int) -> list[int]:
    values = list(values)
    return values * spatial if len(values) == 1 else values


def _swap_last(x):
    return knp.transpose(x, (*range(x.ndim - 2), x.ndim - 1, x.ndim - 2))


def _conv(x, w, stride, padding, dilation, groups):
    """``x (N, C, *S)`` with ``w (O, C/g, *K)``: columns of the padded input times the weight."""
    n, c = x.shape[:2]
    kernel = w.shape[2:]
    out = [windows.output_size(*g) for g in zip(x.shape[2:], kernel, stride, padding, dilation)]
    padded = knp.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    columns = knp.reshape(
        windows.im2col(padded, kernel, stride, dilation, out), (n, groups, -1, math.prod(out))
    )
    y = knp.matmul(knp.reshape(w, (groups, w.shape[0] // groups, -1)), columns)
    return knp.reshape(y, (n, w.shape[0], *out))


def _conv_adjoint(y, w, canvas, stride, padding, dilation, groups):
    """The adjoint of ``_conv`` in ``x``: ``y (N, O, *out)`` back to ``(N, C, *canvas)``,
    ``canvas`` being the unpadded input extent (columns beyond it are dropped)."""
    n, o = y.shape[:2]
    kernel = w.shape[2:]
    weight = _swap_last(knp.reshape(w, (groups, o // groups, -1)))
    columns = knp.matmul(weight, knp.reshape(y, (n, groups, o // groups, -1)))
    columns = knp.reshape(columns, (n, w.shape[1] * groups, math.prod(kernel), -1))
    padded = [c + 2 * p for c, p in zip(canvas, padding)]
    full = windows.col2im(columns, padded, kernel, stride, dilation, y.shape[2:])
    return full[
        (slice(None), slice(None)) + tuple(slice(p, p + c) for p, c in zip(padding, canvas))
    ]


def _conv_weight_grad(x, g, kernel, stride, padding, dilation, groups):
    """``sum_N g @ columns(x)ᵀ``, the gradient of the ``(O, C/g, *kernel)`` weight of a
    convolution from ``x (N, C, …)`` to ``g (N, O, …)`` (for a transposed convolution, ``x`` is
    the output gradient and ``g`` the input: the weight gradient of the adjoint)."""
    n, c = x.shape[:2]
    padded = knp.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    columns = windows.im2col(padded, kernel, stride, dilation, g.shape[2:])
    columns = knp.reshape(columns, (n, groups, -1, math.prod(g.shape[2:])))
    grads = knp.reshape(g, (n, groups, g.shape[1] // groups, -1))
    weight = knp.sum(knp.matmul(grads, _swap_last(columns)), 0)
    return knp.reshape(weight, (g.shape[1], c // groups, *kernel))


def _transposed_extent(size, kernel, stride, padding, dilation, output_padding):
    return [
        (s - 1) * st - 2 * p + d * (k - 1) + op + 1
        for s, k, st, p, d, op in zip(size, kernel, stride, padding, dilation, output_padding)
    ]


@RULES.register(aten.convolution.default)
def convolution(
    ctx, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups
):
    spatial = weight.ndim - 2
    stride, padding, dilation, output_padding = (
        _per_dim(v, spatial) for v in (stride, padding, dilation, output_padding)
    )
    dtype = ctx.out_dtype
    x, w = upcast(x, dtype), upcast(weight, dtype)
    if transposed:
        extent = _transposed_extent(
            x.shape[2:], w.shape[2:], stride, padding, dilation, output_padding
        )
        y = _conv_adjoint(x, w, extent, stride, padding, dilation, groups)
    else:
        y = _conv(x, w, stride, padding, dilation, groups)
    if bias is not None:
        y = knp.add(y, knp.reshape(upcast(bias, dtype), (1, -1) + (1,) * spatial))
    return knp.astype(y, dtype)


@RULES.register(aten.convolution_backward.default)
def convolution_backward(
    ctx,
    grad_output,
    x,
    weight,
    bias_sizes,
    stride,
    padding,
    dilation,
    transposed,
    output_padding,
    groups,
    output_mask,
):
    """Input, weight and bias gradients (``None`` where ``output_mask`` is false). A transposed
    convolution is the adjoint of a convolution, so the two swap roles."""
    spatial = weight.ndim - 2
    stride, padding, dilation = (_per_dim(v, spatial) for v in (stride, padding, dilation))
    compute = compute_dtype(knp.dtype_of(grad_output))
    g, xs, w = (knp.astype(t, compute) for t in (grad_output, x, weight))
    kernel = w.shape[2:]
    grads = [None, None, None]
    if output_mask[0]:
        if transposed:
            grads[0] = _conv(g, w, stride, padding, dilation, groups)
        else:
            grads[0] = _conv_adjoint(g, w, xs.shape[2:], stride, padding, dilation, groups)
    if output_mask[1]:
        if transposed:
            grads[1] = _conv_weight_grad(g, xs, kernel, stride, padding, dilation, groups)
        else:
            grads[1] = _conv_weight_grad(xs, g, kernel, stride, padding, dilation, groups)
    if output_mask[2]:
        grads[2] = knp.sum(g, (0, *range(2, g.ndim)))
    return tuple(None if v is None else knp.astype(v, t.dtype) for v, t in zip(grads, ctx.out))


@RULES.register(aten.col2im.default)
def col2im(ctx, x, output_size, kernel_size, dilation, padding, stride):
    """``(N, C·prod(kernel), L)`` columns summed back into ``(N, C, *output_size)``."""
    batched = x if x.ndim == 3 else knp.expand_dims(x, 0)
    grid = [
        windows.output_size(*g) for g in zip(output_size, kernel_size, stride, padding, dilation)
    ]
    taps = math.prod(kernel_size)  # the channel count is explicit: an empty batch has no -1
    columns = knp.reshape(
        upcast(batched, ctx.out_dtype),
        (batched.shape[0], batched.shape[1] // taps, taps, math.prod(grid)),
    )
    padded = [n + 2 * p for n, p in zip(output_size, padding)]
    full = windows.col2im(columns, padded, kernel_size, stride, dilation, grid)
    y = full[
        (slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in zip(padding, output_size))
    ]
    return knp.astype(knp.reshape(y, ctx.out.shape), ctx.out_dtype)
