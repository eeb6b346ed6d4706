"""Emitters of the ``conv`` and ``conv_transpose`` primitives.

For neuronx-cc (``FunctionBuilder.xla_cpu`` off) a ``conv`` is one
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
- for a dense convolution with fewer result positions than taps (a weight gradient), the
  receptive field of each result position (one strided slice per position) as rows times the
  weight; for such a grouped one (a depthwise weight gradient), each position's field times
  its group's weights, summed over the group's channels and the taps;
- otherwise the columns of the input's windows (one strided slice per tap, concatenated) times
  the weight, one ``dot_general`` batched over groups.

All compute the same sums; only their order differs. ``conv_transpose`` (the input gradient)
is that convolution of the reversed weight where XLA's kernel is fast, and otherwise the
product with the weight as it lies, its taps padded into place (``_conv_transpose``).
"""

from __future__ import annotations

import math

from nkipy_core.ir import TensorType

from .builder import FunctionBuilder, Val, i64_array
from .reductions import summed
from .registry import emits

#: result positions from which XLA CPU's own convolution kernel is as fast as a matrix product
NATIVE_MIN_POSITIONS = 64
#: the most taps a depthwise convolution sums in one loop (``_depthwise``: a 7x7 kernel's 49 on a
#: small image, fastest so); past it, and for a grouped one, fewer result positions than taps
#: (a weight gradient: a thousand taps) are summed per position (``_grouped_fields``)
MAX_TAP_SUM = 64


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
    if not b.xla_cpu or dense:
        return _native(b, result, x, w, stride, low, high, lhs_dilation, rhs_dilation, groups)
    padded = _spread_and_pad(b, x, low, high, lhs_dilation)
    if groups == 1 and positions < taps:
        return _fields(b, result, padded, w, stride, rhs_dilation)
    depthwise = x.shape[1] == groups
    if positions < taps and (not depthwise or taps > MAX_TAP_SUM):
        return _grouped_fields(b, result, padded, w, stride, rhs_dilation, groups)
    windows = [_window(b, padded, tap, stride, rhs_dilation, out) for tap in _taps(kernel)]
    if depthwise:
        return _depthwise(b, result, windows, w, groups)
    return _columns(b, result, windows, w, groups)


@emits("conv_transpose")
def _conv_transpose(
    b: FunctionBuilder,
    result: TensorType,
    x: Val,
    w: Val,
    *,
    stride: tuple,
    low: tuple,
    high: tuple,
    rhs_dilation: tuple,
    groups: int,
) -> Val:
    """The adjoint of a convolution in its input. For neuronx-cc, and for XLA where its own
    kernel is fast (a dense result of ``NATIVE_MIN_POSITIONS`` positions), the convolution of
    ``x`` spread by the stride with the reversed, channel-swapped weight. Otherwise the products
    of every input position with every tap, one ``dot_general`` with the weight as it lies, then
    each tap's products padded into place and summed: on small images with many channels
    (ResNet's last stages) XLA runs that 10x faster than the convolution it would otherwise be."""
    kernel, extent = w.shape[2:], result.shape[2:]
    if result.size == 0 or x.type.size == 0 or w.type.size == 0:
        return b.full(0, result)
    reach = [(k - 1) * d for k, d in zip(kernel, rhs_dilation)]
    positions = math.prod(extent)
    dense = (
        groups == 1
        and positions >= max(NATIVE_MIN_POSITIONS, math.prod(kernel))
        and x.dtype.is_float
    )
    if not b.xla_cpu or dense or w.shape[0] == groups:
        # XLA's own kernel, or (one input channel per group) the fused per-tap sum of ``conv``
        spread_high = [
            e - (q - 1) * s - 1 + lo for e, q, s, lo in zip(extent, x.shape[2:], stride, low)
        ]
        return _conv(
            b,
            result,
            x,
            _adjoint_weight(b, w, groups),
            stride=(1,) * len(kernel),
            low=tuple(r - lo for r, lo in zip(reach, low)),
            high=tuple(spread_high),
            lhs_dilation=stride,
            rhs_dilation=rhs_dilation,
            groups=groups,
        )
    return _scattered_taps(b, result, x, w, stride, low, rhs_dilation, groups)


def _adjoint_weight(b: FunctionBuilder, w: Val, groups: int) -> Val:
    """``w (O, C/g, *K)`` reversed and its in and out channels swapped within each group:
    ``(C, O/g, *K)``, the weight of the convolution that is ``w``'s adjoint."""
    o, cg, kernel = w.shape[0], w.shape[1], w.shape[2:]
    spatial = list(range(2, w.type.rank))
    flipped = b.op("stablehlo.reverse", [w], w.type, {"dimensions": i64_array(spatial)})
    assert isinstance(flipped, Val)
    grouped = b.reshape(flipped, (groups, o // groups, cg, *kernel))
    swapped = b.op(
        "stablehlo.transpose",
        [grouped],
        TensorType((groups, cg, o // groups, *kernel), w.dtype),
        {"permutation": i64_array([0, 2, 1, *(d + 1 for d in spatial)])},
    )
    assert isinstance(swapped, Val)
    return b.reshape(swapped, (groups * cg, o // groups, *kernel))


def _scattered_taps(b, result, x, w, stride, low, rhs_dilation, groups) -> Val:
    """``x (N, O, *S)`` times ``w (O, C/g, *K)``: ``(g, N·S, C/g·taps)`` from one
    ``dot_general`` (batched over groups, contracting the weight's leading axis, as it lies in
    memory); then tap ``k``'s products, at input position ``q``, land at result position
    ``q * stride + k * rhs_dilation - low``: a ``stablehlo.pad`` of interior ``stride - 1``
    whose negative edges crop what falls outside. XLA fuses the pads and their sum."""
    n, o = x.shape[:2]
    grid, kernel, extent = x.shape[2:], w.shape[2:], result.shape[2:]
    cg, og, positions = w.shape[1], o // groups, math.prod(grid)
    taps = _taps(kernel)
    rows = b.reshape(x, (n, groups, og, positions))
    weight = b.reshape(w, (groups, og, cg * len(taps)))
    product = b.op(
        "stablehlo.dot_general",
        [rows, weight],
        TensorType((groups, n, positions, cg * len(taps)), x.dtype),
        {
            "dot_dimension_numbers": "#stablehlo.dot<lhs_batching_dimensions = [1], "
            "rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], "
            "rhs_contracting_dimensions = [1]>"
        },
    )
    assert isinstance(product, Val)
    split = b.reshape(product, (groups, n, positions, cg, len(taps)))
    zero = b.constant(0, x.dtype)
    spans = [(q - 1) * s + 1 for q, s in zip(grid, stride)]
    total = None
    for t, tap in enumerate(taps):
        starts = [k * d - lo for k, d, lo in zip(tap, rhs_dilation, low)]
        if any(a >= e or a + m <= 0 for a, m, e in zip(starts, spans, extent)):
            continue  # every product of this tap falls outside the result
        column = b.op(
            "stablehlo.slice",
            [split],
            TensorType((groups, n, positions, cg, 1), x.dtype),
            {
                "start_indices": i64_array([0, 0, 0, 0, t]),
                "limit_indices": i64_array([groups, n, positions, cg, t + 1]),
                "strides": i64_array([1] * 5),
            },
        )
        assert isinstance(column, Val)
        grouped = b.reshape(column, (groups, n, *grid, cg))
        moved = b.op(
            "stablehlo.transpose",
            [grouped],
            TensorType((n, groups, cg, *grid), x.dtype),
            {"permutation": i64_array([1, 0, len(grid) + 2, *range(2, len(grid) + 2)])},
        )
        assert isinstance(moved, Val)
        values = b.reshape(moved, (n, groups * cg, *grid))
        placed = b.op(
            "stablehlo.pad",
            [values, zero],
            result,
            {
                "edge_padding_low": i64_array([0, 0, *starts]),
                "edge_padding_high": i64_array(
                    [0, 0, *(e - a - m for e, a, m in zip(extent, starts, spans))]
                ),
                "interior_padding": i64_array([0, 0, *(s - 1 for s in stride)]),
            },
        )
        assert isinstance(placed, Val)
        total = placed if total is None else b.binary("add", total, placed)
    return b.full(0, result) if total is None else total


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


def _receptive_field(b: FunctionBuilder, x: Val, position, stride, kernel, rhs_dilation) -> Val:
    """The values the kernel multiplies for result ``position``: ``(N, C, *kernel)``, a strided
    slice of ``x``."""
    start = [q * s for q, s in zip(position, stride)]
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, rhs_dilation)]
    n, c = x.shape[:2]
    field = b.op(
        "stablehlo.slice",
        [x],
        TensorType((n, c, *kernel), x.dtype),
        {
            "start_indices": i64_array([0, 0, *start]),
            "limit_indices": i64_array([n, c, *(a + m for a, m in zip(start, spans))]),
            "strides": i64_array([1, 1, *rhs_dilation]),
        },
    )
    assert isinstance(field, Val)
    return field


def _grouped_fields(b, result, x, w, stride, rhs_dilation, groups) -> Val:
    """A grouped convolution with fewer result positions than kernel taps (a depthwise
    convolution's weight gradient, a convolution over the batch whose kernel is the output
    gradient: 9 positions, 1024 taps): per result position, its receptive field times each
    group's weights, summed over the group's channels and the taps, one multiply-and-reduce
    loop each. With one slice per tap (``_depthwise``, ``_columns``) it would be a thousand slices
    of nine elements, each a loop of its own: 1800 of EfficientNet-B0's backward kernel's 2000
    XLA loops."""
    n, o = result.shape[:2]
    c, kernel = x.shape[1], w.shape[2:]
    per, depth = o // groups, c // groups
    split = (n, groups, per, depth, *kernel)
    summed_axes = list(range(3, 4 + len(kernel)))  # the group's channels and the taps
    weights = b.broadcast(
        b.reshape(w, (groups, per, depth, *kernel)), split, dims=[1, 2, *summed_axes]
    )
    sums = []
    for position in _taps(result.shape[2:]):
        field = _receptive_field(b, x, position, stride, kernel, rhs_dilation)
        values = b.broadcast(
            b.reshape(field, (n, groups, depth, *kernel)), split, dims=[0, 1, *summed_axes]
        )
        total = summed(b, b.binary("multiply", values, weights), summed_axes)
        sums.append(b.reshape(total, (n, groups, per, 1)))
    stacked = b.op(
        "stablehlo.concatenate",
        sums,
        TensorType((n, groups, per, len(sums)), x.dtype),
        {"dimension": "3 : i64"},
    )
    assert isinstance(stacked, Val)
    # kept one value, as _depthwise's sum is: fused into its consumers, each would sum again
    (stacked,) = b.op("stablehlo.optimization_barrier", [stacked], [stacked.type])
    return b.reshape(stacked, result.shape)


def _fields(b, result, x, w, stride, rhs_dilation) -> Val:
    """A dense convolution with fewer result positions than kernel taps (a weight gradient,
    whose kernel is the output gradient): the receptive field of each result position, one
    strided slice each, as rows ``(N, positions, C · taps)`` times the weight. Its columns would
    take one slice per tap: 64 to 1024 small ones in ResNet's weight gradients, 2-5x slower on
    XLA. (A grouped one keeps its columns: the rows' group axis would not lead, and XLA would
    move them first; a depthwise weight gradient's columns are 2x faster.)"""
    n, o = result.shape[:2]
    c, kernel = x.shape[1], w.shape[2:]
    depth = c * math.prod(kernel)
    rows = []
    for position in _taps(result.shape[2:]):
        field = _receptive_field(b, x, position, stride, kernel, rhs_dilation)
        rows.append(b.reshape(field, (n, 1, depth)))
    stacked = b.op(
        "stablehlo.concatenate",
        rows,
        TensorType((n, len(rows), depth), x.dtype),
        {"dimension": "1 : i64"},
    )
    assert isinstance(stacked, Val)
    product = b.op(
        "stablehlo.dot_general",
        [b.reshape(w, (o, depth)), stacked],
        TensorType((o, n, len(rows)), x.dtype),
        {
            "dot_dimension_numbers": "#stablehlo.dot<lhs_contracting_dimensions = [1], "
            "rhs_contracting_dimensions = [2]>"
        },
    )
    assert isinstance(product, Val)
    return _batch_first(b, b.reshape(product, (1, o, n, len(rows))), result)


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
    assert isinstance(product, Val)
    return _batch_first(b, product, result)


def _batch_first(b: FunctionBuilder, product: Val, result: TensorType) -> Val:
    """A product ``(groups, O/groups, N, positions)`` as the ``(N, O, *out)`` result. With one
    group the transpose is the last op, so that XLA cancels it against a transpose back (a
    weight gradient's, ``(C, O, *K)`` to ``(O, C, *K)``): across a reshape it does not, and
    XLA CPU moves such results (9 floats contiguous, megabytes) at a tenth of memory speed."""
    groups, og, n = product.shape[:3]
    out = result.shape[2:]
    if groups == 1:
        split = b.reshape(product, (og, n, *out))
        moved = b.op(
            "stablehlo.transpose",
            [split],
            result,
            {"permutation": i64_array([1, 0, *range(2, 2 + len(out))])},
        )
        assert isinstance(moved, Val)
        return moved
    moved = b.op(
        "stablehlo.transpose",
        [product],
        TensorType((n, groups, og, product.shape[3]), product.dtype),
        {"permutation": i64_array([2, 0, 1, 3])},
    )
    assert isinstance(moved, Val)
    return b.reshape(moved, result.shape)
