"""Each NKIPy primitive as torch operations, with the primitive's own semantics
(``nkipy_core.ir.primitives``: its NumPy expression is the reference).

A rule takes the operands as torch tensors and the op's attributes, and returns the result of the
op's type. Half floats follow ``half_float_rule`` as the cpu runtime does: an op marked
``half_compute`` computes in f32 and rounds its result once (``run``). A primitive without a rule
here (random bits, whose words are unsigned 32-bit integers torch barely computes with;
convolutions of a dilated input; collectives and custom calls) keeps its kernel
on the cpu runtime (``unsupported``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from nkipy_core import _torch
from nkipy_core.ir import DType, HalfFloat, Kernel, TensorType, half_float_rule, numpy_to_torch

Rule = Callable[..., torch.Tensor]

RULES: dict[str, Rule] = {}

#: element types torch computes with as NumPy does (its unsigned 32 and 64-bit integers lack
#: most operations)
DTYPES = frozenset(DType) - {DType.u32, DType.u64}


def _rule(*names: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn

    return register


# the primitives that are one torch function of their operands
RULES.update(
    {
        "exp": torch.exp,
        "log": torch.log,
        "log1p": torch.log1p,
        "expm1": torch.expm1,
        "sqrt": torch.sqrt,
        "rsqrt": torch.rsqrt,
        "sin": torch.sin,
        "cos": torch.cos,
        "tan": torch.tan,
        "tanh": torch.tanh,
        "atan": torch.atan,
        "logistic": torch.sigmoid,
        "erf": torch.erf,
        "erfc": torch.erfc,
        "floor": torch.floor,
        "ceil": torch.ceil,
        "round": torch.round,  # half to even, as np.round
        "isnan": torch.isnan,
        "isinf": torch.isinf,
        "signbit": torch.signbit,
        "neg": torch.neg,
        "abs": torch.abs,
        "not": torch.logical_not,
        "bitwise_not": torch.bitwise_not,
        "add": torch.add,
        "sub": torch.sub,
        "mul": torch.mul,
        "pow": torch.pow,
        "maximum": torch.maximum,
        "minimum": torch.minimum,
        "remainder": torch.remainder,
        "fmod": torch.fmod,
        "floor_divide": torch.floor_divide,
        "atan2": torch.atan2,
        "and": torch.logical_and,
        "or": torch.logical_or,
        "xor": torch.logical_xor,
        "bitwise_and": torch.bitwise_and,
        "bitwise_or": torch.bitwise_or,
        "bitwise_xor": torch.bitwise_xor,
        "eq": torch.eq,
        "ne": torch.ne,
        "lt": torch.lt,
        "le": torch.le,
        "gt": torch.gt,
        "ge": torch.ge,
        "select": torch.where,
    }
)


@_rule("sign")
def _sign(x: torch.Tensor) -> torch.Tensor:
    """``np.sign``: NaN stays NaN (torch's ``sign`` gives 0 for it)."""
    return torch.where(torch.isnan(x), x, torch.sign(x)) if x.is_floating_point() else torch.sign(x)


@_rule("div")
def _div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.true_divide(a, b)


@_rule("convert")
def _convert(x: torch.Tensor, *, dtype: DType) -> torch.Tensor:
    return x.to(dtype.torch)


@_rule("broadcast")
def _broadcast(x: torch.Tensor, *, shape: tuple[int, ...]) -> torch.Tensor:
    return x.expand(shape)


@_rule("reshape")
def _reshape(x: torch.Tensor, *, shape: tuple[int, ...]) -> torch.Tensor:
    return x.reshape(shape)


@_rule("transpose")
def _transpose(x: torch.Tensor, *, perm: tuple[int, ...]) -> torch.Tensor:
    return x.permute(perm)


@_rule("reverse")
def _reverse(x: torch.Tensor, *, axes: tuple[int, ...]) -> torch.Tensor:
    return torch.flip(x, axes) if axes else x


@_rule("slice")
def _slice(x: torch.Tensor, *, start: tuple, limit: tuple, stride: tuple) -> torch.Tensor:
    return x[tuple(slice(s, e, k) for s, e, k in zip(start, limit, stride))]


@_rule("concatenate")
def _concatenate(*xs: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.cat(xs, axis)


@_rule("pad")
def _pad(x: torch.Tensor, value: torch.Tensor, *, low: tuple, high: tuple) -> torch.Tensor:
    """Zero padding, then ``value`` where no element of ``x`` landed."""
    pads = [p for lo, hi in zip(reversed(low), reversed(high)) for p in (lo, hi)]
    padded = torch.constant_pad_nd(x, pads, 0)
    inside = torch.constant_pad_nd(torch.ones_like(x, dtype=torch.bool), pads, False)
    return torch.where(inside, padded, value)


@_rule("take")
def _take(x: torch.Tensor, idx: torch.Tensor, *, axis: int) -> torch.Tensor:
    shape = x.shape[:axis] + idx.shape + x.shape[axis + 1 :]
    return torch.index_select(x, axis, idx.reshape(-1)).reshape(shape)


@_rule("take_along_axis")
def _take_along_axis(x: torch.Tensor, idx: torch.Tensor, *, axis: int) -> torch.Tensor:
    return torch.gather(x, axis, idx.to(torch.int64))


@_rule("scatter_add")
def _scatter_add(
    x: torch.Tensor, idx: torch.Tensor, upd: torch.Tensor, *, axis: int, kind: str = "add"
) -> torch.Tensor:
    return torch.index_add(x, axis, idx, upd)


#: scatter_reduce kinds -> torch's ``scatter_reduce`` (each propagates NaN, as the reference does)
_SCATTER_REDUCE = {"max": "amax", "min": "amin", "prod": "prod"}
#: scatter_reduce kinds -> the torch function combining two rows as they do
_COMBINE = {"max": torch.maximum, "min": torch.minimum, "prod": torch.mul}


@_rule("scatter_reduce")
def _scatter_reduce(
    x: torch.Tensor, idx: torch.Tensor, upd: torch.Tensor, *, axis: int, kind: str
) -> torch.Tensor:
    """Row ``idx[i]`` along ``axis`` combined with row ``i`` of the updates: torch's
    ``scatter_reduce`` with the index spread over the updates' shape. TorchInductor has loops
    for none of these kinds and calls ATen for them (3.5 µs each: four per decode step of a
    two-layer model, which writes its key and value caches with an overwrite, a max scatter).
    With one update row nothing meets it, so the scatter is that row combined with the one it
    lands on and copied there, which TorchInductor computes in its loops. (TorchInductor
    2.13 copies into a broadcast operand as if into its one element, pytorch/pytorch#183986:
    such an operand, a scatter's usual start, ``full``, is laid out first.)"""
    if idx.numel() == 1:
        index = idx.reshape(1).to(torch.int64)
        if 0 in x.stride():
            x = x.contiguous()
        row = _COMBINE[kind](torch.index_select(x, axis, index), upd)
        return torch.index_copy(x, axis, index, row)
    shape = [-1 if i == axis else 1 for i in range(upd.dim())]
    index = idx.to(torch.int64).reshape(shape).expand(upd.shape)
    return torch.scatter_reduce(x, axis, index, upd, _SCATTER_REDUCE[kind], include_self=True)


@_rule("dot")
def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``, an operand of one row or column computed once. TorchInductor computes a
    batched product of one row (or one column) on the CPU as a loop of elementwise products
    summed, and inlines the operands into it: a row computed in the kernel is computed again for
    every column. A decode step's query, rotated by cosines and sines of its position, was
    rotated again for every key: a two-layer model's attention loops took 20 µs a step, 11 µs
    with the query computed once. So such an operand is computed into memory first, as the
    operands of every other product are for oneDNN; one already in memory (a parameter, a view
    of one) stays where it is."""
    if a.shape[-2] == 1 and a.is_contiguous():
        a = _torch.force_stride_order(a, a.stride())
    if b.shape[-1] == 1 and b.is_contiguous():
        b = _torch.force_stride_order(b, b.stride())
    return torch.matmul(a, b)


@_rule("reduce")
def _reduce(x: torch.Tensor, *, kind: str, axes: tuple, keepdims: bool) -> torch.Tensor:
    axes = tuple(axes)
    if not axes:
        return x.to(torch.bool) if kind in ("any", "all") else x
    if kind == "sum":
        return torch.sum(x, axes, keepdim=keepdims, dtype=x.dtype)
    if kind == "max":
        return torch.amax(x, axes, keepdim=keepdims)
    if kind == "min":
        return torch.amin(x, axes, keepdim=keepdims)
    if kind in ("any", "all"):
        return getattr(torch, kind)(x, axes, keepdim=keepdims)
    for axis in sorted(axes, reverse=True):  # prod: one axis at a time
        x = torch.prod(x, axis, keepdim=keepdims, dtype=x.dtype)
    return x


@_rule("argreduce")
def _argreduce(x: torch.Tensor, *, kind: str, axis: int, keepdims: bool) -> torch.Tensor:
    fn = torch.argmax if kind == "argmax" else torch.argmin
    return fn(x, axis, keepdim=keepdims)


@_rule("cumulative")
def _cumulative(x: torch.Tensor, *, kind: str, axis: int) -> torch.Tensor:
    if kind == "cumsum":
        return torch.cumsum(x, axis, dtype=x.dtype)
    if kind == "cumprod":
        return torch.cumprod(x, axis, dtype=x.dtype)
    return getattr(torch, kind)(x, axis).values


@_rule("sort")
def _sort(x: torch.Tensor, *, axis: int, descending: bool, indices: bool) -> torch.Tensor:
    """A stable ascending sort of ``-x`` for descending order, as the reference does: NaN comes
    last either way."""
    order = torch.sort(-x if descending else x, dim=axis, stable=True).indices
    return order if indices else torch.gather(x, axis, order)


@_rule("iota")
def _iota(*, shape: tuple, dtype: DType, axis: int) -> torch.Tensor:
    view = tuple(d if i == axis else 1 for i, d in enumerate(shape))
    return torch.arange(shape[axis], dtype=dtype.torch).reshape(view).expand(shape)


@_rule("constant")
def _constant(*, value: Any) -> torch.Tensor:
    """The constant as TorchInductor folds it into its loops: a scalar as a number, and a half
    float array as its f32 values converted. A bf16 array reaches torch as int16 bits viewed as
    bf16, a bit cast that keeps the loop reading it from vectorising (a causal mask's fill value
    made a softmax's masking loop scalar: 340 µs against inductor's 196)."""
    array = value.array
    dtype = DType.from_numpy(array.dtype).torch
    if array.ndim == 0:
        number = array.astype(np.float64) if dtype.is_floating_point else array
        return torch.scalar_tensor(number.item(), dtype=dtype)
    if dtype in (torch.bfloat16, torch.float16):
        return torch.from_numpy(array.astype(np.float32)).to(dtype)
    return numpy_to_torch(array.copy())


@_rule("conv")
def _conv(
    x: torch.Tensor,
    w: torch.Tensor,
    *,
    stride: tuple,
    low: tuple,
    high: tuple,
    lhs_dilation: tuple,
    rhs_dilation: tuple,
    groups: int,
) -> torch.Tensor:
    """torch's convolution, padding with it where it can (the same zeros before and after each
    spatial dimension: a convolution's usual padding, with no padded copy of the input made);
    other padding (negative amounts crop) first, as the reference's.

    Shapes oneDNN computes slowly run otherwise. A 1x1 convolution of a few pixels, or of a 1x1
    image, is a matrix product with the pixels as rows (``_as_product``, ``_few_pixels``). A
    grouped convolution with one output channel per group and several input channels, or with
    more taps than positions, is the weight gradient of a depthwise convolution (its input
    channels are the batch, its window the output gradient): oneDNN has fast loops only for one
    input and one output channel per group, and these run as a sum over the input's windows that
    TorchInductor makes one loop of (``_as_windows``: 50-110 µs where oneDNN takes 0.3-2.7 ms,
    EfficientNet-B0's and ConvNeXt's late stages). Other convolutions whose window has more taps
    than their output has positions and fits in their unpadded input are weight gradients too
    (the lowering of a convolution's backward, whose window is the output gradient): each runs
    as one (``_as_weight_gradient``). A forward convolution of a small image can have more taps
    than positions too, but its window is wider than the image."""
    spatial = [
        (size + lo + hi - d * (k - 1) - 1) // s + 1
        for size, k, lo, hi, s, d in zip(x.shape[2:], w.shape[2:], low, high, stride, rhs_dilation)
    ]
    taps, positions = math.prod(w.shape[2:]), math.prod(spatial)
    zeros = [0] * len(stride)
    pads = [p for lo, hi in zip(reversed(low), reversed(high)) for p in (lo, hi)]
    if taps == 1 and groups == 1 and _few_pixels(x.shape[0], positions):
        x = torch.constant_pad_nd(x, pads, 0)[(Ellipsis, *(slice(None, None, k) for k in stride))]
        return _as_product(x, w.reshape(w.shape[:2]).t())
    if groups > 1 and w.shape[0] == groups and (w.shape[1] > 1 or taps > positions):
        return _as_windows(torch.constant_pad_nd(x, pads, 0), w, stride, rhs_dilation, groups)
    if taps > positions and all(k <= size for k, size in zip(w.shape[2:], x.shape[2:])):
        return _as_weight_gradient(x, w, stride, low, rhs_dilation, groups, spatial)
    padding = list(low)
    if low != high or min(low, default=0) < 0:
        x, padding = torch.constant_pad_nd(x, pads, 0), zeros
    return torch.convolution(x, w, None, stride, padding, rhs_dilation, False, zeros, groups)


#: pixels (batch times positions) up to which a 1x1 convolution runs as a matrix product
#: (``_as_product``): measured on this project's benchmark machine, 6x faster at 8 pixels, as
#: fast at 32 and beyond
PRODUCT_PIXELS = 16


def _few_pixels(batch: int, positions: int) -> bool:
    """Whether a 1x1 convolution runs as a matrix product (``_as_product``): of few pixels, or
    of a 1x1 image, however large its batch. The latter's product is row-major as it is (no
    copy back at a kernel's boundary), and oneDNN is slow on it when its channels are few: a
    squeeze-and-excitation layer's weight gradient, whose channels are the batch (48 by 2 by
    1152: 68 µs, 9 µs as a product)."""
    return positions == 1 or batch * positions <= PRODUCT_PIXELS


def _as_product(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The convolution of ``x`` with a 1x1 window, ``w`` as an (input, output) channel matrix:
    one matrix product of the pixels (rows) and ``w``, the result a channels-last view. oneDNN
    and torch's own 1x1 convolution compute the product the other way round, with the pixels as
    the columns, which is several times slower when they are few (a 2x2 image with 1152
    channels, batch 2: 320 µs against 52), and as fast when they are many."""
    batch, channels = x.shape[:2]
    rows = torch.movedim(x, 1, -1).reshape(-1, channels)
    product = torch.mm(rows, w).reshape(batch, *x.shape[2:], w.shape[1])
    return torch.movedim(product, -1, 1)


def _as_windows(
    x: torch.Tensor, w: torch.Tensor, stride: tuple, dilation: tuple, groups: int
) -> torch.Tensor:
    """The convolution of padded ``x`` as the sum over each window of its products with the
    weight: the windows are views of ``x`` (``unfold``), so TorchInductor computes the products
    and their sum in one loop. ``x`` is padded into memory first: inlined, the padding would be
    a bounds test at every tap of every window (EfficientNet-B0's training step: 12 % slower).
    Half floats are multiplied and summed in f32, as oneDNN's convolutions do (``run`` rounds the
    result once)."""
    x = _torch.force_stride_order(x, x.stride())
    batch, channels = x.shape[:2]
    rank = len(stride)
    if x.dtype in (torch.float16, torch.bfloat16):
        x, w = x.float(), w.float()
    windows = x
    for axis, (k, s, d) in enumerate(zip(w.shape[2:], stride, dilation)):
        windows = windows.unfold(2 + axis, d * (k - 1) + 1, s)  # positions, then the taps
    windows = windows[(Ellipsis, *(slice(None, None, d) for d in dilation))]
    spatial = windows.shape[2 : 2 + rank]
    windows = windows.reshape(batch, groups, channels // groups, *spatial, *w.shape[2:])
    weight = w.reshape(groups, w.shape[1], *([1] * rank), *w.shape[2:])
    taps = (2, *range(3 + rank, 3 + 2 * rank))
    return (windows * weight).sum(taps).reshape(batch, groups, *spatial)


def _as_weight_gradient(
    x: torch.Tensor,
    w: torch.Tensor,
    stride: tuple,
    low: tuple,
    dilation: tuple,
    groups: int,
    spatial: list[int],
) -> torch.Tensor:
    """The convolution ``out[n, g*O + o, i] = sum(c, a) x[n, g*C + c, i*stride + a*dilation] *
    w[g*O + o, c, a]`` computed as the weight gradient of another one, which oneDNN computes
    several times faster than a convolution with a window this large (a depthwise layer's
    gradient: 5x). In that one ``c`` is the batch, ``n`` the input channel within a group, ``w``
    the output gradient, and stride and dilation trade places; the input is padded (or cropped)
    to exactly the extent the windows read."""
    batch, channels = x.shape[:2]
    per_group = channels // groups
    inputs = (
        x.reshape(batch, groups, per_group, *x.shape[2:])
        .permute(2, 1, 0, *range(3, x.dim() + 1))
        .reshape(per_group, groups * batch, *x.shape[2:])
    )
    extents = [
        s * (n - 1) + d * (k - 1) + 1 for s, n, d, k in zip(stride, spatial, dilation, w.shape[2:])
    ]
    pads = [
        p
        for size, lo, extent in zip(reversed(x.shape[2:]), reversed(low), reversed(extents))
        for p in (lo, extent - size - lo)
    ]
    inputs = torch.constant_pad_nd(inputs, pads, 0)
    weight = w.new_empty((w.shape[0], batch, *spatial))  # its shape is all that is read
    zeros = [0] * len(stride)
    _, gradient, _ = torch.ops.aten.convolution_backward(
        w.transpose(0, 1),
        inputs,
        weight,
        None,
        list(dilation),
        zeros,
        list(stride),
        False,
        zeros,
        groups,
        [False, True, False],
    )
    return gradient.transpose(0, 1)


@_rule("conv_transpose")
def _conv_transpose(
    x: torch.Tensor,
    w: torch.Tensor,
    *,
    stride: tuple,
    low: tuple,
    high: tuple,
    rhs_dilation: tuple,
    groups: int,
) -> torch.Tensor:
    """torch's transposed convolution without padding, whose every output position the
    reference computes too, then ``low`` and ``high`` cropped off (padded where negative). With
    a 1x1 window and unit strides (a 1x1 convolution's input gradient) it is one matrix product
    (``_as_product``)."""
    zeros = [0] * len(stride)
    if (
        math.prod(w.shape[2:]) == 1
        and groups == 1
        and all(k == 1 for k in stride)
        and _few_pixels(x.shape[0], math.prod(x.shape[2:]))
    ):
        full = _as_product(x, w.reshape(w.shape[:2]))
    else:
        full = torch.convolution(x, w, None, stride, zeros, rhs_dilation, True, zeros, groups)
    crops = [-p for lo, hi in zip(reversed(low), reversed(high)) for p in (lo, hi)]
    return torch.constant_pad_nd(full, crops, 0)


def unsupported(kernel: Kernel) -> str | None:
    """Why the ``inductor`` runtime cannot run ``kernel`` (a primitive without a rule, or an
    element type torch does not compute with), or ``None``."""
    for op in kernel.ops:
        if op.prim not in RULES:
            return f"no torch rule for the primitive {op.prim}"
        if op.prim == "conv" and any(d != 1 for d in op.params["lhs_dilation"]):
            return "a convolution of a dilated input"
        for t in (*[v.type for v in op.operands], op.result.type):
            if t.dtype not in DTYPES:
                return f"element type {t.dtype.value}"
    return None


#: primitives whose torch operations on half floats already compute as the reference does:
#: products of the half floats (exact in f32) summed in f32 and rounded once (oneDNN's bf16 and
#: f16 matrix products and convolutions), at half the cost of widening the operands first
_HALF_PRODUCTS = frozenset({"dot", "conv", "conv_transpose"})


def run(
    prim: str,
    operands: Sequence[torch.Tensor],
    params: dict[str, Any],
    types: Sequence[TensorType],
    result: TensorType,
) -> torch.Tensor:
    """One op: its rule on ``operands``, half floats as ``half_float_rule`` says, the result of
    the op's element type."""
    rule = half_float_rule(prim, types, result)
    if rule is HalfFloat.COMPUTE_IN_F32 and prim not in _HALF_PRODUCTS:
        operands = [
            x.float() if x.dtype in (torch.float16, torch.bfloat16) else x for x in operands
        ]
    elif rule is HalfFloat.CONVERT_THROUGH_F32:
        operands = [operands[0].float()]
    out = RULES[prim](*operands, **params)
    return out if out.dtype == result.dtype.torch else out.to(result.dtype.torch)
