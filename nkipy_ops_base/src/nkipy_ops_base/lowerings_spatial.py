"""Spatial ops over the trailing 1, 2 or 3 dims, forward and backward: pooling (average, max,
adaptive max and fractional max with the indices torch returns, adaptive average) and
resampling (nearest, bilinear and antialiased bilinear upsampling).

Windows come from ``windows``; the averages' divisors depend only on shapes, so they are
computed here as constants with ATen's rules for padding and ``ceil_mode``. Max-pool indices
are flat positions in the unpadded spatial extent, first maximum in window order; the backward
scatters the gradient to them. Adaptive average pooling and upsampling are linear maps along
each spatial dim, so they multiply by constant matrices (built with ATen's index arithmetic, in
f32) and their backward by the transposes.
"""

from __future__ import annotations

import math
import re

import numpy as np
import torch

from nkipy_core import _torch, knp
from nkipy_core.ir import DType

from .conventions import require
from .opmath import upcast
from .rules import RULES
from .windows import output_size, place_windows, window_slices

aten = torch.ops.aten


def _spatial(ctx) -> int:
    """1, 2 or 3: each op exists per dimensionality, named ``…1d``, ``…2d`` or ``…3d``."""
    return int(re.search(r"(\d)d", _torch.schema(ctx.op).name).group(1))


class _Pool:
    """Geometry of a pooling op over ``x``'s trailing ``len(kernel_size)`` dims."""

    def __init__(self, ctx, x, kernel_size, stride, padding, dilation=(1,), ceil_mode=False):
        def per_dim(values):
            values = list(values)
            return values * spatial if len(values) == 1 else values

        spatial = _spatial(ctx)
        self.kernel = per_dim(kernel_size)
        self.stride = per_dim(stride) if len(stride) else self.kernel
        self.padding = per_dim(padding)
        self.dilation = per_dim(dilation)
        self.size = list(x.shape[-spatial:])
        self.lead = list(x.shape[:-spatial])
        geometry = list(zip(self.size, self.kernel, self.stride, self.padding, self.dilation))
        self.out = [output_size(*g, ceil_mode) for g in geometry]
        # ceil_mode's last window may run past the right padding
        self.high = [
            max(p, (o - 1) * s + d * (k - 1) + 1 - n - p)
            for (n, k, s, p, d), o in zip(geometry, self.out)
        ]

    def pad(self, x, value=0):
        return knp.pad(x, [(0, 0)] * len(self.lead) + list(zip(self.padding, self.high)), value)

    def windows(self, padded):
        return window_slices(padded, self.kernel, self.stride, self.dilation, self.out)

    def unpad(self, padded):
        lead = (slice(None),) * len(self.lead)
        return padded[lead + tuple(slice(p, p + n) for p, n in zip(self.padding, self.size))]

    def place(self, pieces):
        canvas = [p + n + h for p, n, h in zip(self.padding, self.size, self.high)]
        return self.unpad(place_windows(pieces, canvas, self.kernel, self.stride, self.dilation))

    def divisor(self, count_include_pad: bool, divisor_override) -> np.ndarray:
        """ATen's per-window divisor: the window clipped to input plus padding, or to the input."""
        if divisor_override:
            return np.full(self.out, divisor_override, np.float32)
        factors = []
        for n, k, s, p, o in zip(self.size, self.kernel, self.stride, self.padding, self.out):
            start = np.arange(o) * s - p
            end = np.minimum(start + k, n + p)
            counts = end - start if count_include_pad else np.minimum(end, n) - np.maximum(start, 0)
            factors.append(counts)
        return math.prod(np.ix_(*factors)).astype(np.float32)


def _sum(arrays):
    total = arrays[0]
    for a in arrays[1:]:
        total = knp.add(total, a)
    return total


@RULES.register(aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default)
def avg_pool(
    ctx,
    x,
    kernel_size,
    stride=(),
    padding=(0,),
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    pool = _Pool(ctx, x, kernel_size, stride, padding, ceil_mode=ceil_mode)
    total = _sum(pool.windows(pool.pad(upcast(x, ctx.out_dtype))))
    return knp.astype(
        knp.divide(total, pool.divisor(count_include_pad, divisor_override)), ctx.out_dtype
    )


@RULES.register(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)
def avg_pool_backward(
    ctx,
    grad_output,
    x,
    kernel_size,
    stride,
    padding,
    ceil_mode,
    count_include_pad,
    divisor_override,
):
    pool = _Pool(ctx, x, kernel_size, stride, padding, ceil_mode=ceil_mode)
    share = knp.divide(
        upcast(grad_output, ctx.out_dtype), pool.divisor(count_include_pad, divisor_override)
    )
    return knp.astype(pool.place([share] * math.prod(pool.kernel)), ctx.out_dtype)


def _lowest(dtype):
    return -math.inf if dtype.is_float else np.iinfo(dtype.numpy).min


@RULES.register(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def max_pool_with_indices(
    ctx, x, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False
):
    pool = _Pool(ctx, x, kernel_size, stride, padding, dilation, ceil_mode)
    stacked = knp.stack(pool.windows(pool.pad(x, _lowest(knp.dtype_of(x)))), axis=-1)
    which = knp.argmax(stacked, -1)
    index = 0
    geometry = zip(pool.size, pool.kernel, pool.stride, pool.padding, pool.dilation, pool.out)
    for axis, (n, k, s, p, d, o) in enumerate(geometry):
        offset = knp.remainder(knp.floor_divide(which, math.prod(pool.kernel[axis + 1 :])), k)
        start = np.reshape(
            np.arange(o) * s - p, [o if a == axis else 1 for a in range(len(pool.out))]
        )
        index = knp.add(knp.multiply(index, n), knp.add(knp.multiply(offset, d), start))
    return knp.max(stacked, -1), index


@RULES.register(
    aten.max_pool2d_with_indices_backward.default, aten.max_pool3d_with_indices_backward.default
)
def max_pool_with_indices_backward(
    ctx, grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    return _scatter_to_indices(ctx, grad_output, x, indices, _spatial(ctx))


@RULES.register(
    aten.adaptive_max_pool2d_backward.default, aten.adaptive_max_pool3d_backward.default
)
def adaptive_max_pool_backward(ctx, grad_output, x, indices):
    return _scatter_to_indices(ctx, grad_output, x, indices, _spatial(ctx))


def _scatter_to_indices(ctx, grad_output, x, indices, spatial: int):
    """Scatter-add each output gradient to the flat input position its index names."""
    extent = math.prod(x.shape[-spatial:])
    planes = math.prod(x.shape[:-spatial])
    base = knp.multiply(knp.reshape(knp.arange(planes), (planes, 1)), extent)
    positions = knp.reshape(knp.add(knp.reshape(indices, (planes, -1)), base), (-1,))
    grad = knp.reshape(knp.astype(grad_output, ctx.out_dtype), (-1,))
    flat = knp.scatter_add(knp.zeros((planes * extent,), ctx.out_dtype), positions, grad)
    return knp.reshape(flat, x.shape)


def _fractional_starts(samples, size: int, out: int, pool: int):
    """``(planes, out)`` window starts along one dim from each plane's sample ``u``, as ATen's
    CPU kernel computes them in the sample's dtype: ``int((i + u) a) - int(u a)`` with
    ``a = (size - pool) / (out - 1)``, the last window ending at the last input."""
    planes = samples.shape[0]
    last = knp.full((planes, 1), size - pool, DType.i64)
    if out == 1:
        return last
    dtype = knp.dtype_of(samples)
    alpha = dtype.numpy.type(np.float32(size - pool) / np.float32(out - 1))
    u = knp.reshape(samples, (planes, 1))
    steps = knp.add(u, knp.astype(knp.arange(out - 1), dtype))
    starts = knp.subtract(
        knp.astype(knp.multiply(steps, alpha), DType.i64),
        knp.astype(knp.multiply(u, alpha), DType.i64),
    )
    return knp.concatenate([starts, last], axis=1)


@RULES.register(aten.fractional_max_pool2d.default, aten.fractional_max_pool3d.default)
def fractional_max_pool(ctx, x, kernel_size, output_size, random_samples):
    """Max over windows of ``kernel_size`` whose starts depend on ``random_samples`` (one per
    plane and spatial dim; ATen reads 2-d samples as (width, height), 3-d ones as (time,
    height, width)). The starts are data, so each plane's window elements are gathered by
    their flat positions ``(planes, outputs, window)``. The index is ATen's: the first maximum
    in window order, or the last NaN of a window that has one."""
    spatial = len(kernel_size)
    sizes = x.shape[-spatial:]
    planes = math.prod(x.shape[:-spatial])
    samples = knp.reshape(random_samples, (planes, spatial))
    order = [1, 0] if spatial == 2 else [0, 1, 2]
    rank = 1 + 2 * spatial
    flat = 0
    for d, (n, k, o) in enumerate(zip(sizes, kernel_size, output_size)):
        starts = _fractional_starts(samples[:, order[d]], n, o, k)
        positions = knp.add(knp.reshape(starts, (planes, o, 1)), np.arange(k).reshape(1, 1, k))
        shape = [planes] + [1] * (rank - 1)
        shape[1 + d], shape[1 + spatial + d] = o, k
        flat = knp.add(flat, knp.multiply(knp.reshape(positions, shape), math.prod(sizes[d + 1 :])))
    outputs, window = math.prod(output_size), math.prod(kernel_size)
    flat = knp.reshape(
        knp.broadcast_to(flat, (planes, *output_size, *kernel_size)), (planes, outputs, window)
    )
    values = knp.take_along_axis(
        knp.reshape(x, (planes, -1)), knp.reshape(flat, (planes, -1)), axis=1
    )
    values = knp.reshape(values, (planes, outputs, window))
    last_nan = knp.max(knp.where(knp.isnan(values), np.arange(window), -1), -1, keepdims=True)
    which = knp.where(
        knp.greater_equal(last_nan, 0), last_nan, knp.argmax(values, -1, keepdims=True)
    )
    shape = (*x.shape[:-spatial], *output_size)
    index = knp.reshape(knp.take_along_axis(flat, which, -1), shape)
    return knp.reshape(knp.max(values, -1), shape), index


@RULES.register(
    aten.fractional_max_pool2d_backward.default, aten.fractional_max_pool3d_backward.default
)
def fractional_max_pool_backward(ctx, grad_output, x, kernel_size, output_size, indices):
    return _scatter_to_indices(ctx, grad_output, x, indices, len(kernel_size))


def _adaptive_windows(size: int, out: int) -> np.ndarray:
    """``(out, longest window)`` input positions of adaptive pooling's windows
    ``[floor(i·size/out), ceil((i+1)·size/out))``, short windows repeating their last position."""
    starts = [(i * size) // out for i in range(out)]
    ends = [-(-((i + 1) * size) // out) for i in range(out)]
    longest = max(e - s for s, e in zip(starts, ends))
    return np.array([[min(s + j, e - 1) for j in range(longest)] for s, e in zip(starts, ends)])


@RULES.register(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)
def adaptive_max_pool(ctx, x, output_size):
    """Max over each window and its flat input position (first maximum in window order; the
    repeated positions padding short windows come last and cannot win a tie). The windows are
    gathered one spatial dim at a time, ``(..., o1, l1, o2, l2, …)``, then grouped as
    ``(..., o1, o2, …, l1·l2·…)``."""
    spatial = len(output_size)
    sizes = x.shape[-spatial:]
    positions = [_adaptive_windows(n, o) for n, o in zip(sizes, output_size)]
    windows = x
    for k, p in enumerate(positions):
        windows = knp.take(windows, p, axis=x.ndim - spatial + 2 * k)
    lead = list(range(x.ndim - spatial))
    outs = [x.ndim - spatial + 2 * k for k in range(spatial)]
    windows = knp.transpose(windows, [*lead, *outs, *(o + 1 for o in outs)])
    out_shape = tuple(p.shape[0] for p in positions)
    longest = math.prod(p.shape[1] for p in positions)
    windows = knp.reshape(windows, (*x.shape[:-spatial], *out_shape, longest))
    which = knp.argmax(windows, -1, keepdims=True)
    flat = np.zeros(out_shape + tuple(p.shape[1] for p in positions), np.int64)
    for k, p in enumerate(positions):
        axes_shape = [1] * (2 * spatial)
        axes_shape[k], axes_shape[spatial + k] = p.shape
        flat = flat + p.reshape(axes_shape) * math.prod(sizes[k + 1 :])
    flat = flat.reshape(*out_shape, longest)
    found = knp.take_along_axis(knp.broadcast_to(flat, windows.shape), which, -1)
    return knp.max(windows, -1), knp.squeeze(found, -1)


def _averaging(size: int, out: int) -> np.ndarray:
    """The ``(out, size)`` matrix of adaptive pooling: row ``i`` averages
    ``[floor(i·size/out), ceil((i+1)·size/out))``."""
    matrix = np.zeros((out, size), np.float32)
    for i in range(out):
        start, end = (i * size) // out, -(-((i + 1) * size) // out)
        matrix[i, start:end] = 1 / (end - start)
    return matrix


def _nearest(size: int, out: int, scale: float | None) -> np.ndarray:
    """Row ``i`` picks input ``min(floor(i · size/out), size - 1)`` (``1/scale`` if given)."""
    step = np.float32(1 / scale if scale else size / out)
    source = np.minimum(
        np.floor(np.arange(out, dtype=np.float32) * step).astype(np.int64), size - 1
    )
    return np.eye(size, dtype=np.float32)[source]


def _linear(size: int, out: int, align_corners: bool, scale: float | None) -> np.ndarray:
    """Row ``i`` mixes the two inputs around ATen's source coordinate for output ``i``."""
    i = np.arange(out, dtype=np.float32)
    if align_corners:
        source = i * np.float32((size - 1) / (out - 1) if out > 1 else 0)
    else:
        source = np.maximum(
            (i + np.float32(0.5)) * np.float32(1 / scale if scale else size / out)
            - np.float32(0.5),
            0,
        )
    low = np.minimum(np.floor(source).astype(np.int64), size - 1)
    high = np.minimum(low + 1, size - 1)
    weight = (source - low).astype(np.float32)
    matrix = np.zeros((out, size), np.float32)
    np.add.at(matrix, (np.arange(out), low), 1 - weight)
    np.add.at(matrix, (np.arange(out), high), weight)
    return matrix


def _separable(ctx, x, matrices):
    """Each ``(out, in)`` matrix applied along its trailing dim of ``x`` (the last matrix to the
    last dim), in opmath."""
    y = upcast(x, ctx.out_dtype)
    for k, matrix in enumerate(matrices):
        swap = list(range(y.ndim))
        swap[y.ndim - len(matrices) + k], swap[-1] = swap[-1], swap[y.ndim - len(matrices) + k]
        y = knp.transpose(knp.matmul(knp.transpose(y, swap), matrix.T), swap)
    return knp.astype(y, ctx.out_dtype)


def _scales(scale_factors) -> list:
    return list(scale_factors) if scale_factors else [None, None]


@RULES.register(
    aten.adaptive_avg_pool1d.default,
    aten._adaptive_avg_pool2d.default,
    aten._adaptive_avg_pool3d.default,
)
def adaptive_avg_pool(ctx, x, output_size):
    sizes = x.shape[-len(output_size) :]
    return _separable(ctx, x, [_averaging(n, o) for n, o in zip(sizes, output_size)])


@RULES.register(
    aten._adaptive_avg_pool2d_backward.default, aten._adaptive_avg_pool3d_backward.default
)
def adaptive_avg_pool_backward(ctx, grad_output, x):
    spatial = _spatial(ctx)
    sizes = zip(x.shape[-spatial:], grad_output.shape[-spatial:])
    return _separable(ctx, grad_output, [_averaging(n, o).T for n, o in sizes])


@RULES.register(aten.upsample_nearest2d.vec)
def upsample_nearest2d(ctx, x, output_size, scale_factors):
    sizes = zip(x.shape[-2:], ctx.out.shape[-2:], _scales(scale_factors))
    return _separable(ctx, x, [_nearest(n, o, s) for n, o, s in sizes])


@RULES.register(aten.upsample_nearest2d_backward.default)
def upsample_nearest2d_backward(
    ctx, grad_output, output_size, input_size, scales_h=None, scales_w=None
):
    sizes = zip(input_size[-2:], output_size, (scales_h, scales_w))
    return _separable(ctx, grad_output, [_nearest(n, o, s).T for n, o, s in sizes])


@RULES.register(aten.upsample_bilinear2d.vec)
def upsample_bilinear2d(ctx, x, output_size, align_corners, scale_factors):
    sizes = zip(x.shape[-2:], ctx.out.shape[-2:], _scales(scale_factors))
    return _separable(ctx, x, [_linear(n, o, align_corners, s) for n, o, s in sizes])


def _antialiased(size: int, out: int, align_corners: bool, scale: float | None, dtype):
    """The ``(out, size)`` matrix of antialiased bilinear resampling (PIL's scheme, which ATen
    follows): output ``i`` is centred at input coordinate ``s · (i + 0.5)`` and averages the
    inputs under a triangle of half-width ``max(s, 1)`` around it, normalised to sum 1, where
    ``s`` is ATen's source scale. Built in f64, rounded once to ``dtype``."""
    if align_corners:
        s = (size - 1) / (out - 1) if out > 1 else 0.0
    else:
        s = 1 / scale if scale else size / out
    support, inverse = (s, 1 / s) if s >= 1 else (1.0, 1.0)
    matrix = np.zeros((out, size))
    for i in range(out):
        center = s * (i + 0.5)
        low = max(int(center - support + 0.5), 0)
        high = min(int(center + support + 0.5), size)
        weights = np.maximum(1 - np.abs((np.arange(low, high) - center + 0.5) * inverse), 0)
        matrix[i, low:high] = weights / weights.sum()
    return matrix.astype(dtype)


def _matrix_dtype(ctx):
    return np.float64 if ctx.out_dtype is DType.f64 else np.float32


@RULES.register(aten._upsample_bilinear2d_aa.default)
def upsample_bilinear2d_aa(ctx, x, output_size, align_corners, scales_h=None, scales_w=None):
    """Floats only: torch resamples uint8 images in fixed point, with its own rounding."""
    require(ctx.out_dtype.is_float, f"antialiased upsampling of {ctx.out_dtype.value}")
    sizes = zip(x.shape[-2:], output_size, (scales_h, scales_w))
    dtype = _matrix_dtype(ctx)
    return _separable(ctx, x, [_antialiased(n, o, align_corners, s, dtype) for n, o, s in sizes])


@RULES.register(aten._upsample_bilinear2d_aa_backward.default)
def upsample_bilinear2d_aa_backward(
    ctx, grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None
):
    sizes = zip(input_size[-2:], output_size, (scales_h, scales_w))
    dtype = _matrix_dtype(ctx)
    return _separable(
        ctx, grad_output, [_antialiased(n, o, align_corners, s, dtype).T for n, o, s in sizes]
    )


@RULES.register(aten.upsample_bilinear2d_backward.default)
def upsample_bilinear2d_backward(
    ctx, grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None
):
    sizes = zip(input_size[-2:], output_size, (scales_h, scales_w))
    return _separable(ctx, grad_output, [_linear(n, o, align_corners, s).T for n, o, s in sizes])
