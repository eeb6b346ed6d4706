"""``grid_sampler_2d``/``grid_sampler_3d`` and their backward: sampling an image (or a volume)
at the points of a grid.

Each output point reads a few input pixels ("taps") with weights: 2×2 (2×2×2) for bilinear
(trilinear), the nearest pixel, 4×4 for bicubic (torch's cubic convolution, A = -0.75; 2-D
only, as in torch). A tap is the product of one tap
per axis, each carrying its pixel coordinate, its weight and the weight's derivative with respect
to the source coordinate, so that one description serves the forward (gather, weigh, sum), the
input gradient (scatter the weighted output gradient back to the pixels, ``scatter_add``) and the
grid gradient (weight derivatives times pixel values, chained through the coordinate transform).

Source coordinates follow ATen: grid values in ``[-1, 1]`` are unnormalised (``align_corners``),
then ``border`` clamps and ``reflection`` reflects them, tracking the derivative of each step as
ATen's ``*_set_grad`` helpers do (0 where clamped, sign flips where reflected). Bicubic applies
the padding to each tap's pixel instead, so its coordinates carry only the unnormalising scale.
Taps outside the image read zero.

Half floats compute in their own dtype, one rounding per operation, in ATen's order of
operations: unlike most kernels, ATen's CPU grid sampler does not widen bf16/f16 to f32 (its
vectorized half arithmetic rounds every step), and a pixel coordinate rounded differently picks
a different pixel. Bilinear and nearest forwards then match torch bit for bit.
"""

from __future__ import annotations

import itertools
import math

import attrs
import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .rules import RULES

aten = torch.ops.aten

_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2
_CUBIC_A = -0.75


@attrs.frozen(eq=False)
class _AxisTap:
    """One pixel along one axis: its coordinate (float, integral), weight, and d weight / d source.
    Compared (and hashed) by identity: the taps of a point key its pixel values."""

    pixel: object
    weight: object
    slope: object


def _clip(coord, slope, size: int):
    inside = knp.logical_and(knp.greater(coord, 0), knp.less(coord, size - 1))
    return knp.minimum(knp.maximum(coord, 0), size - 1), knp.where(inside, slope, 0)


def _reflect(coord, slope, twice_low: int, twice_high: int):
    if twice_low == twice_high:
        return knp.multiply(coord, 0), knp.multiply(slope, 0)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    shifted = knp.subtract(coord, low)
    sign = knp.where(knp.less(shifted, 0), -1, 1)
    distance = knp.abs(shifted)
    extra = knp.fmod(distance, span)
    even = knp.equal(knp.remainder(knp.floor(knp.divide(distance, span)), 2), 0)
    reflected = knp.where(even, knp.add(extra, low), knp.add(knp.subtract(span, extra), low))
    return reflected, knp.multiply(slope, knp.where(even, sign, knp.negative(sign)))


def _pad(coord, slope, size: int, padding_mode: int, align_corners: bool):
    """ATen's ``compute_coordinates``: the padding mode applied to a source coordinate."""
    if padding_mode == _BORDER:
        return _clip(coord, slope, size)
    if padding_mode == _REFLECTION:
        bounds = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        return _clip(*_reflect(coord, slope, *bounds), size)
    return coord, slope


def _cubic_weights(t):
    """Cubic-convolution weights of the 4 pixels around ``t`` in [0, 1), and their derivatives."""
    a = _CUBIC_A
    near, near_slope = (a + 2, -(a + 3), 0, 1), (3 * (a + 2), -2 * (a + 3), 0)  # |x| <= 1
    far, far_slope = (a, -5 * a, 8 * a, -4 * a), (3 * a, -10 * a, 8 * a)  # 1 < |x| < 2
    distances = (knp.add(t, 1), t, knp.subtract(1, t), knp.subtract(2, t))
    weights = [knp.polyval(p, d) for p, d in zip((far, near, near, far), distances)]
    # d/dt of each weight: the distance grows with t for the first two pixels, shrinks for the rest
    slopes = [
        knp.multiply(knp.polyval(p, d), sign)
        for p, d, sign in zip(
            (far_slope, near_slope, near_slope, far_slope), distances, (1, 1, -1, -1)
        )
    ]
    return weights, slopes


def _axis_taps(grid_coord, size: int, mode: int, padding_mode: int, align_corners: bool):
    """The taps along one axis, and d source / d grid for the chain rule."""
    scale = (size - 1) / 2 if align_corners else size / 2
    coord = knp.multiply(
        knp.add(grid_coord, 1), scale
    )  # in ATen's order, which half floats round by
    coord = coord if align_corners else knp.subtract(coord, 0.5)
    slope = knp.full(coord.shape, scale, knp.dtype_of(coord))
    if mode == _BICUBIC:
        base = knp.floor(coord)
        weights, slopes = _cubic_weights(knp.subtract(coord, base))
        pixels = [
            _pad(knp.add(base, k - 1), slope, size, padding_mode, align_corners)[0]
            for k in range(4)
        ]
        return [_AxisTap(p, w, s) for p, w, s in zip(pixels, weights, slopes)], slope
    coord, slope = _pad(coord, slope, size, padding_mode, align_corners)
    if mode == _NEAREST:
        return [_AxisTap(knp.round(coord), 1.0, 0.0)], slope
    base = knp.floor(coord)
    after = knp.add(base, 1)
    return [
        _AxisTap(base, knp.subtract(after, coord), -1.0),
        _AxisTap(after, knp.subtract(coord, base), 1.0),
    ], slope


class _Sampler:
    """The taps of every grid point of an (N, C, *spatial) input, flattened to (N, 1, P) each.
    Axes are in the grid's coordinate order (x = width, y = height, z = depth); a tap is one
    axis tap per axis, in the order ATen's kernels visit them (z, then y, then x fastest)."""

    def __init__(self, shape, grid, mode: int, padding_mode: int, align_corners: bool):
        self.n, self.c, *spatial = shape
        self.sizes = spatial[::-1]
        self.points = math.prod(grid.shape[1:-1])
        flat = knp.reshape(grid, (self.n, 1, self.points, len(self.sizes)))
        self.axes, self.slopes = zip(
            *(
                _axis_taps(flat[..., k], size, mode, padding_mode, align_corners)
                for k, size in enumerate(self.sizes)
            )
        )
        self.taps = [tap[::-1] for tap in itertools.product(*self.axes[::-1])]

    def pixel(self, taps):
        """The flat pixel index of a tap (0 when outside) and whether it is inside the input.
        The index is formed in integers: a half float holds pixel coordinates exactly, not
        their flat positions."""
        inside = None
        for t, size in zip(taps, self.sizes):
            within = knp.logical_and(knp.greater_equal(t.pixel, 0), knp.less(t.pixel, size))
            inside = within if inside is None else knp.logical_and(inside, within)
        linear, stride = 0, 1
        for t, size in zip(taps, self.sizes):
            coordinate = knp.astype(knp.where(inside, t.pixel, 0), DType.i64)
            linear = knp.add(knp.multiply(coordinate, stride), linear)
            stride *= size
        return linear, inside

    def weight(self, taps, slope_axis: int | None = None):
        """The product of the tap's weights (the weight's slope on ``slope_axis``, if given)."""
        factors = [t.slope if k == slope_axis else t.weight for k, t in enumerate(taps)]
        total = factors[0]
        for factor in factors[1:]:
            total = knp.multiply(total, factor)
        return total

    def read(self, image, taps):
        """The tap's pixel of every channel, (N, C, P); zero outside the input."""
        index, inside = self.pixel(taps)
        values = knp.take_along_axis(
            image, knp.broadcast_to(index, (self.n, self.c, self.points)), 2
        )
        return knp.where(inside, values, 0)


def _sum(terms):
    """``terms`` added left to right (the order ATen's kernel adds them in)."""
    total = 0
    for term in terms:
        total = knp.add(total, term)
    return total


def _image(x, dtype):
    return knp.reshape(knp.astype(x, dtype), (*x.shape[:2], math.prod(x.shape[2:])))


def _grid_gradient(sampler, image, grad):
    """d loss / d grid, (N, P, axes): for each axis, the pixels times the slopes of their
    weights along it, summed over that axis's taps first and then weighted by the other axes'
    weights (ATen's grouping, so that half floats round alike), summed over the channels and
    chained through d source / d grid."""
    values = {taps: sampler.read(image, taps) for taps in sampler.taps}
    shape = (sampler.n, sampler.points)
    gradients = []
    for k in range(len(sampler.axes)):
        others = [t for t in sampler.taps if t[k] is sampler.axes[k][0]]
        d = _sum(
            knp.multiply(
                _sum(
                    knp.multiply(values[(*rest[:k], tk, *rest[k + 1 :])], tk.slope)
                    for tk in sampler.axes[k]
                ),
                sampler.weight(tuple(t for j, t in enumerate(rest) if j != k)),
            )
            for rest in others
        )
        gradient = knp.sum(knp.multiply(d, grad), 1)
        gradients.append(knp.multiply(gradient, knp.reshape(sampler.slopes[k], shape)))
    return knp.stack(gradients, -1)


@RULES.register(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def grid_sampler(ctx, x, grid, interpolation_mode, padding_mode, align_corners):
    dtype = ctx.out_dtype
    sampler = _Sampler(
        x.shape, knp.astype(grid, dtype), interpolation_mode, padding_mode, align_corners
    )
    image = _image(x, dtype)
    out = _sum(
        knp.multiply(sampler.read(image, taps), sampler.weight(taps)) for taps in sampler.taps
    )
    return knp.astype(knp.reshape(out, ctx.out.shape), ctx.out_dtype)


@RULES.register(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def grid_sampler_backward(
    ctx, grad_output, x, grid, interpolation_mode, padding_mode, align_corners, output_mask
):
    """``(grad_input, grad_grid)``; either is skipped (``None``) when ``output_mask`` says so."""
    input_type, grid_type = ctx.out
    dtype = knp.dtype_of(x)
    sampler = _Sampler(
        x.shape, knp.astype(grid, dtype), interpolation_mode, padding_mode, align_corners
    )
    n, c, points = sampler.n, sampler.c, sampler.points
    grad = knp.reshape(knp.astype(grad_output, dtype), (n, c, points))
    grad_input = grad_grid = None
    if output_mask[0]:
        extent = math.prod(sampler.sizes)
        plane = knp.multiply(knp.reshape(knp.arange(n * c), (n, c, 1)), extent)
        positions, updates = [], []
        for taps in sampler.taps:
            index, inside = sampler.pixel(taps)
            weight = knp.where(inside, sampler.weight(taps), 0)
            positions.append(knp.reshape(knp.add(plane, index), (-1,)))
            updates.append(knp.reshape(knp.multiply(grad, weight), (-1,)))
        flat = knp.zeros((math.prod(x.shape),), dtype)
        flat = knp.scatter_add(flat, knp.concatenate(positions), knp.concatenate(updates))
        grad_input = knp.astype(knp.reshape(flat, x.shape), input_type.dtype)
    if output_mask[1]:
        if interpolation_mode == _NEAREST:
            grad_grid = knp.zeros(grid_type.shape, grid_type.dtype)
        else:
            gradient = _grid_gradient(sampler, _image(x, dtype), grad)
            grad_grid = knp.astype(knp.reshape(gradient, grid_type.shape), grid_type.dtype)
    return grad_input, grad_grid
