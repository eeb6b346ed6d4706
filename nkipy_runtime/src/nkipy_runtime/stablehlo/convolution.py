"""Emitter of the ``conv`` primitive.

For neuronx-cc (``FunctionBuilder.native_convolution``) a ``conv`` is one
``stablehlo.convolution`` in torch's layouts (``NCHW`` input and result, ``OIHW`` weight), one
batch group, ``groups`` feature groups: the compiler maps it to its tensor engine.

XLA's CPU backend runs some convolutions far slower than the same arithmetic spelled otherwise
(measured with ``benchmarks/bench_vision.py`` and single convolutions, one thread): with
feature groups it loops element by element (a 7x7 depthwise convolution 11x slower than
torch), and on small images with many channels its kernel is slow (a 3x3 convolution of
512 channels on 2x2 pixels: 63 ms, against 3.3 ms in torch and 5.6 ms as a matrix product).
So for the ``xla`` runtime, ``conv`` is written as

- ``stablehlo.convolution`` for a dense float convolution whose result has at least
  ``NATIVE_MIN_POSITIONS`` positions, as many as its kernel has taps (XLA's own kernel is then
  as fast as torch's);
- a sum over kernel taps of strided slices times per-channel weights, for a depthwise
  convolution (one input channel per group): XLA fuses it into one loop;
- otherwise the columns of the input's windows (one strided slice per tap, concatenated) times
  the weight, one ``dot_general`` batched over groups.

All three compute the same sums; only their order differs.
"""

from __future__ import annotations

import math

from nkipy_core.ir import TensorType

from .builder import FunctionBuilder, Val, i64_array
from .registry import emits

#: result positions from which XLA CPU's own convolution kernel is as fast as a matrix product
NATIVE_MIN_POSITIONS = 64


@emits("conv")
def _conv(
    b: FunctionBuilder,
    result: TensorType,
    x: Val,
    w: Val,
    *,
    stride: tuple,
    low: tuple,
    high: tuple,
    lhs_dilation: tuple,
    rhs_dilation: tuple,
    groups: int,
) -> Val:
    out, kernel = result.shape[2:], w.shape[2:]
    taps, positions = math.prod(kernel), math.prod(out)
    if result.size == 0 or x.type.size == 0 or w.type.size == 0:
        return b.full(0, result)
    dense = groups == 1 and positions >= max(NATIVE_MIN_POSITIONS, taps) and x.dtype.is_float
    if b.native_convolution or dense:
        return _native(b, result, x, w, stride, low, high, lhs_dilation, rhs_dilation, groups)
    padded = _spread_and_pad(b, x, low, high, lhs_dilation)
    windows = [_window(b, padded, tap, stride, rhs_dilation, out) for tap in _taps(kernel)]
    if x.shape[1] == groups:
        return _depthwise(b, result, windows, w, groups)
    return _columns(b, result, windows, w, groups)


def _native(b, result, x, w, stride, low, high, lhs_dilation, rhs_dilation, groups) -> Val:
    spatial = ", ".join(str(i) for i in range(x.type.rank - 2))
    padding = [[lo, hi] for lo, hi in zip(low, high)]
    return b.op(
        "stablehlo.convolution",
        [x, w],
        result,
        {
            "batch_group_count": "1 : i64",
            "dimension_numbers": f"#stablehlo.conv<[b, f, {spatial}]x[o, i, {spatial}]->[b, f, {spatial}]>",
            "feature_group_count": f"{groups} : i64",
            "lhs_dilation": i64_array(lhs_dilation),
            "padding": f"dense<{padding}> : tensor<{len(padding)}x2xi64>",
            "rhs_dilation": i64_array(rhs_dilation),
            "window_strides": i64_array(stride),
        },
    )


def _taps(kernel: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Kernel offsets in row-major order (the order of a flattened kernel)."""
    taps: list[tuple[int, ...]] = [()]
    for k in kernel:
        taps = [t + (i,) for t in taps for i in range(k)]
    return taps


def _spread_and_pad(b: FunctionBuilder, x: Val, low, high, lhs_dilation) -> Val:
    """``x`` with ``lhs_dilation - 1`` zeros between elements and padded by ``low``/``high``
    (negative crops): one ``stablehlo.pad``, whose interior padding is the spreading."""
    interior = [d - 1 for d in lhs_dilation]
    shape = [
        ((n - 1) * d + 1 if n else 0) + lo + hi
        for n, d, lo, hi in zip(x.shape[2:], lhs_dilation, low, high)
    ]
    if not any(interior) and not any(low) and not any(high):
        return x
    return b.op(
        "stablehlo.pad",
        [x, b.constant(0, x.dtype)],
        TensorType((*x.shape[:2], *shape), x.dtype),
        {
            "edge_padding_low": i64_array([0, 0, *low]),
            "edge_padding_high": i64_array([0, 0, *high]),
            "interior_padding": i64_array([0, 0, *interior]),
        },
    )


def _window(b: FunctionBuilder, x: Val, tap, stride, rhs_dilation, out) -> Val:
    """The values kernel tap ``tap`` multiplies: ``(N, C, *out)``, a strided slice of ``x``."""
    start = [t * d for t, d in zip(tap, rhs_dilation)]
    limit = [s0 + st * (n - 1) + 1 for s0, st, n in zip(start, stride, out)]
    return b.op(
        "stablehlo.slice",
        [x],
        TensorType((*x.shape[:2], *out), x.dtype),
        {
            "start_indices": i64_array([0, 0, *start]),
            "limit_indices": i64_array([*x.shape[:2], *limit]),
            "strides": i64_array([1, 1, *stride]),
        },
    )


def _depthwise(
    b: FunctionBuilder, result: TensorType, windows: list[Val], w: Val, groups: int
) -> Val:
    """One input channel per group, ``per`` outputs each: the sum over taps of the tap's window
    (broadcast over the ``per`` outputs) times that tap's ``(groups, per)`` weights."""
    n, o = result.shape[:2]
    out = result.shape[2:]
    per = o // groups
    split = (n, groups, per, *out)
    flat = b.reshape(w, (groups, per, len(windows)))
    total = None
    for t, window in enumerate(windows):
        column = b.op(
            "stablehlo.slice",
            [flat],
            TensorType((groups, per, 1), w.dtype),
            {
                "start_indices": i64_array([0, 0, t]),
                "limit_indices": i64_array([groups, per, t + 1]),
                "strides": i64_array([1, 1, 1]),
            },
        )
        weights = b.broadcast(b.reshape(column, (groups, per)), split, dims=[1, 2])
        values = b.broadcast(window, split, dims=[0, 1, *range(3, 3 + len(out))])
        term = b.binary("multiply", values, weights)
        total = term if total is None else b.binary("add", total, term)
    assert total is not None
    # XLA fuses an elementwise producer into each consumer, and recomputes it in each: the taps
    # would be summed again by every reduction that reads the result (a LayerNorm's or a batch
    # norm's mean and variance, 12x the convolution's own time). The barrier keeps it one loop.
    (total,) = b.op("stablehlo.optimization_barrier", [total], [total.type])
    return b.reshape(total, result.shape)


def _columns(
    b: FunctionBuilder, result: TensorType, windows: list[Val], w: Val, groups: int
) -> Val:
    """The windows as columns ``(N, groups, C/groups · taps, positions)`` times the weight
    ``(groups, O/groups, C/groups · taps)``: a ``dot_general`` batched over groups."""
    n, o = result.shape[:2]
    c = windows[0].shape[1]
    positions = math.prod(result.shape[2:])
    stacked = [b.reshape(v, (n, c, 1, positions)) for v in windows]
    columns = b.op(
        "stablehlo.concatenate",
        stacked,
        TensorType((n, c, len(windows), positions), w.dtype),
        {"dimension": "2 : i64"},
    )
    depth = c // groups * len(windows)
    columns = b.reshape(columns, (n, groups, depth, positions))
    weight = b.reshape(w, (groups, o // groups, depth))
    product = b.op(
        "stablehlo.dot_general",
        [weight, columns],
        TensorType((groups, o // groups, n, positions), w.dtype),
        {
            "dot_dimension_numbers": "#stablehlo.dot<lhs_batching_dimensions = [0], "
            "rhs_batching_dimensions = [1], lhs_contracting_dimensions = [2], "
            "rhs_contracting_dimensions = [2]>"
        },
    )
    moved = b.op(
        "stablehlo.transpose",
        [product],
        TensorType((n, groups, o // groups, positions), w.dtype),
        {"permutation": i64_array([2, 0, 1, 3])},
    )
    return b.reshape(moved, result.shape)
