"""Convolution, forward and backward, any number of spatial dims, grouped, strided, dilated,
padded and transposed: ``convolution`` and ``convolution_backward``; and ``col2im`` (``fold``).

Every convolution here is one primitive, so a compiler with convolution units sees one (XLA,
neuronx-cc) and the ``cpu`` runtime picks its NumPy strategy per shape: the forward convolution
(``knp.conv``); its adjoint (``knp.conv_transpose``), which is both the input gradient and the
transposed convolution; and the weight gradient, a convolution over the batch. Half
floats are computed in f32 and rounded once, as torch's CPU kernels do.
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


def _pairs(padding):
    return [(p, p) for p in padding]


def _conv(x, w, stride, padding, dilation, groups):
    """``x (N, C, *S)`` with ``w (O, C/g, *K)``: one ``conv`` primitive."""
    return knp.conv(
        x, w, stride=stride, padding=_pairs(padding), rhs_dilation=dilation, groups=groups
    )


def _conv_transposed(x, w, extent, stride, padding, dilation, groups):
    """The adjoint of ``_conv`` in its input: ``x (N, I, *S)`` with ``w (I, O/g, *K)`` to
    ``(N, O, *extent)``. The high padding is what makes the forward convolution's input
    ``extent`` long (smaller than ``padding`` by torch's ``output_padding``)."""
    kernel = w.shape[2:]
    high = [
        (s - 1) * st + d * (k - 1) + 1 - p - e
        for s, st, d, k, p, e in zip(x.shape[2:], stride, dilation, kernel, padding, extent)
    ]
    return knp.conv_transpose(
        x,
        w,
        stride=stride,
        padding=list(zip(padding, high)),
        rhs_dilation=dilation,
        groups=groups,
    )


def _conv_weight_grad(x, g, kernel, stride, padding, dilation, groups):
    """The gradient of the ``(O, C/g, *kernel)`` weight of a convolution from ``x (N, C, …)`` to
    ``g (N, O, …)`` (for a transposed convolution, ``x`` is the output gradient and ``g`` the
    input: the weight gradient of the adjoint). It is itself a convolution, over the batch: ``x``
    with batch and channels swapped (each group's batch block a feature group) by ``g`` as the
    kernel, spread by ``stride``, stepping by ``dilation``; the high padding drops the rows the
    forward convolution never reached."""
    n, c = x.shape[:2]
    spatial = list(range(3, x.ndim + 1))
    grouped = knp.reshape(x, (n, groups, c // groups, *x.shape[2:]))
    lhs = knp.reshape(
        knp.transpose(grouped, (2, 1, 0, *spatial)), (c // groups, groups * n, *x.shape[2:])
    )
    rhs = knp.transpose(g, (1, 0, *range(2, g.ndim)))
    high = [
        p - (s + 2 * p - ((o - 1) * st + 1) - d * (k - 1))
        for s, p, o, st, d, k in zip(x.shape[2:], padding, g.shape[2:], stride, dilation, kernel)
    ]
    weight = knp.conv(
        lhs,
        rhs,
        stride=dilation,
        padding=list(zip(padding, high)),
        rhs_dilation=stride,
        groups=groups,
    )
    return knp.transpose(weight, (1, 0, *range(2, weight.ndim)))


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
        y = _conv_transposed(x, w, extent, stride, padding, dilation, groups)
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
            grads[0] = _conv_transposed(g, w, xs.shape[2:], stride, padding, dilation, groups)
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
    # the channel count is spelled out: -1 cannot be inferred from an empty batch
    window = math.prod(kernel_size)
    columns = knp.reshape(
        upcast(batched, ctx.out_dtype),
        (batched.shape[0], batched.shape[1] // window, window, math.prod(grid)),
    )
    padded = [n + 2 * p for n, p in zip(output_size, padding)]
    full = windows.col2im(columns, padded, kernel_size, stride, dilation, grid)
    y = full[
        (slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in zip(padding, output_size))
    ]
    return knp.astype(knp.reshape(y, ctx.out.shape), ctx.out_dtype)
