"""``knp``: the NumPy-flavoured language lowering rules are written in.

Every function takes NumPy arrays, Python scalars or traced tensors. With traced tensors it
records NKIPy primitives into the kernel being built; with only NumPy arrays it evaluates the
same primitives with NumPy, so a rule can be unit-tested as plain NumPy code::

    def softmax(x, axis=-1):
        e = knp.exp(x - knp.max(x, axis=axis, keepdims=True))
        return e / knp.sum(e, axis=axis, keepdims=True)

Type promotion follows torch, not NumPy (``int32 + 1.5`` is ``float32``), because the programs
being lowered are torch programs; shapes broadcast as in NumPy.
"""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from nkipy_core.ir.builder import Traced, apply, constant
from nkipy_core.ir.graph import ConstantData, Opaque
from nkipy_core.ir.types import DType

if TYPE_CHECKING:
    from typing_extensions import TypeIs

Array = Traced | np.ndarray
Scalar = bool | int | float
ArrayLike = Array | Scalar

__all__ = [
    "abs",
    "add",
    "all",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "any",
    "arange",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctan2",
    "arctanh",
    "argmax",
    "argmin",
    "argsort",
    "asarray",
    "astype",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "broadcast_to",
    "ceil",
    "collective_broadcast",
    "concatenate",
    "conv",
    "conv_transpose",
    "cos",
    "cosh",
    "cummax",
    "cummin",
    "cumprod",
    "cumsum",
    "custom_call",
    "divide",
    "dtype_of",
    "equal",
    "erf",
    "erfc",
    "exp",
    "exp2",
    "expand_dims",
    "expm1",
    "flip",
    "floor",
    "floor_divide",
    "fmod",
    "full",
    "greater",
    "greater_equal",
    "is_traced",
    "isinf",
    "isnan",
    "less",
    "less_equal",
    "log",
    "log10",
    "log1p",
    "log2",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "multiply",
    "negative",
    "not_equal",
    "ones",
    "pad",
    "polyval",
    "power",
    "prod",
    "random_bits",
    "random_state",
    "reduce_scatter",
    "remainder",
    "reshape",
    "result_type",
    "round",
    "rsqrt",
    "scatter_add",
    "scatter_reduce",
    "sigmoid",
    "sign",
    "signbit",
    "sin",
    "sinh",
    "sort",
    "sqrt",
    "squeeze",
    "stack",
    "subtract",
    "sum",
    "take",
    "take_along_axis",
    "tan",
    "tanh",
    "Traced",
    "transpose",
    "trunc",
    "where",
    "zeros",
]

# -- types ------------------------------------------------------------------------------------


def to_dtype(dtype: Any) -> DType:
    """Accept an NKIPy, torch or NumPy dtype (or a Python type) and return the NKIPy one."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, torch.dtype):
        return DType.from_torch(dtype)
    return DType.from_numpy(np.dtype(dtype))


def is_traced(x: Any) -> bool:
    return isinstance(x, Traced)


def dtype_of(x: Array) -> DType:
    return x.value.type.dtype if isinstance(x, Traced) else DType.from_numpy(np.asarray(x).dtype)


def _is_scalar(x: Any) -> TypeIs[Scalar | np.generic]:
    return isinstance(x, (bool, int, float, np.generic)) and not isinstance(x, np.ndarray)


def _operand_kind(x: ArrayLike) -> tuple[Any, ...]:
    """What torch's promotion reads of an operand: a scalar's Python type, or a tensor's dtype
    and whether it has dimensions."""
    if _is_scalar(x):
        return (type(x.item() if isinstance(x, np.generic) else x),)
    return (dtype_of(x), builtins.min(len(x.shape), 1))


def _meta(kind: tuple[Any, ...]) -> Any:
    if len(kind) == 1:
        return kind[0](1)
    dtype, ndim = kind
    return torch.empty((1,) * ndim, dtype=dtype.torch, device="meta")


@functools.cache
def _promote(kinds: tuple[tuple[Any, ...], ...], default_dtype: torch.dtype) -> DType:
    """torch's promotion of operands of these kinds, asked once per combination: a lowering
    promotes tens of thousands of times, and each question builds meta tensors (through the
    fake-tensor mode while compiling). A float scalar's type is the default dtype, so it is part
    of the key."""
    metas = [_meta(kind) for kind in kinds]
    acc = metas[0]
    if len(metas) == 1:
        return (
            DType.from_torch(acc.dtype)
            if isinstance(acc, torch.Tensor)
            else to_dtype(torch.tensor(acc).dtype)
        )
    promoted = torch.result_type(metas[0], metas[1])
    for m in metas[2:]:
        promoted = torch.result_type(torch.empty((1,), dtype=promoted, device="meta"), m)
    return DType.from_torch(promoted)


def result_type(*xs: ArrayLike) -> DType:
    """torch's promotion of the operands: dimensioned tensors over 0-d tensors over scalars."""
    return _promote(tuple(_operand_kind(x) for x in xs), torch.get_default_dtype())


def asarray(x: ArrayLike, dtype: Any = None) -> Array:
    """``x`` as an array of ``dtype`` (a scalar becomes a 0-d array, rounded as torch rounds a
    ``Scalar``: see ``DType.scalar``; traced stays traced)."""
    if isinstance(x, Traced):
        return x if dtype is None else astype(x, dtype)
    if _is_scalar(x):
        x = x.item() if isinstance(x, np.generic) else x
        return (to_dtype(dtype) if dtype is not None else result_type(x)).scalar(x)
    return np.asarray(x) if dtype is None else np.asarray(x, dtype=to_dtype(dtype).numpy)


def astype(x: ArrayLike, dtype: Any) -> Array:
    target = to_dtype(dtype)
    if _is_scalar(x):  # straight to the target: a Python float must not round through f32 first
        return asarray(x, target)
    x = asarray(x)
    if dtype_of(x) is target:
        return x
    return apply("convert", [x], {"dtype": target})


def _shape(x: ArrayLike) -> tuple[int, ...]:
    return tuple(np.shape(x)) if not isinstance(x, Traced) else x.shape


def broadcast_to(x: ArrayLike, shape: Sequence[int]) -> Array:
    x = asarray(x)
    shape = tuple(int(d) for d in shape)
    if _shape(x) == shape:
        return x
    return apply("broadcast", [x], {"shape": shape})


def _lift(arrays: Sequence[Array]) -> list[Array]:
    """If any operand is traced, make the others constants of its kernel (before broadcasting
    them, so a scalar stays a scalar constant instead of becoming a full array literal)."""
    builder = next((a.builder for a in arrays if isinstance(a, Traced)), None)
    if builder is None:
        return list(arrays)
    return [a if isinstance(a, Traced) else constant(builder, a, dtype_of(a)) for a in arrays]


def _operands(*xs: ArrayLike, dtype: DType | None = None) -> list[Array]:
    """Promote to one dtype and broadcast to one shape, as elementwise primitives require."""
    dtype = dtype or result_type(*xs)
    arrays = _lift([astype(x, dtype) for x in xs])
    shape = np.broadcast_shapes(*(_shape(a) for a in arrays))
    return [broadcast_to(a, shape) for a in arrays]


# -- elementwise ------------------------------------------------------------------------------


def _as_float(dtype: DType) -> DType:
    """``dtype`` if it is a float, else torch's default float type (what int math promotes to)."""
    return dtype if dtype.is_float else DType.from_torch(torch.get_default_dtype())


def _float_dtype(x: ArrayLike) -> DType:
    return _as_float(result_type(x))


def _unary_float(prim: str) -> Callable[[ArrayLike], Array]:
    def fn(x: ArrayLike) -> Array:
        return apply(prim, [astype(x, _float_dtype(x))], {})

    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}``; integer inputs are computed in the default float dtype."
    return fn


exp = _unary_float("exp")
log = _unary_float("log")
log1p = _unary_float("log1p")
expm1 = _unary_float("expm1")
sqrt = _unary_float("sqrt")
rsqrt = _unary_float("rsqrt")
sin = _unary_float("sin")
cos = _unary_float("cos")
tan = _unary_float("tan")
tanh = _unary_float("tanh")
arctan = _unary_float("atan")
sigmoid = _unary_float("logistic")
erf = _unary_float("erf")
erfc = _unary_float("erfc")


def _float_composite(fn: Callable[[Array], Array]) -> Callable[[ArrayLike], Array]:
    """A float function written over primitives, rounded once as torch's kernel rounds: integer
    inputs are computed in the default float dtype, half floats in f32."""

    @functools.wraps(fn)
    def wrapper(x: ArrayLike) -> Array:
        dtype = _float_dtype(x)
        return astype(fn(astype(x, DType.f32 if dtype.is_half else dtype)), dtype)

    return wrapper


@_float_composite
def sinh(x: Array) -> Array:
    """``(expm1(x) - expm1(-x)) / 2``, which does not cancel near zero."""
    return divide(subtract(expm1(x), expm1(negative(x))), 2)


@_float_composite
def cosh(x: Array) -> Array:
    return divide(add(exp(x), exp(negative(x))), 2)


@_float_composite
def arcsin(x: Array) -> Array:
    return arctan2(x, sqrt(multiply(subtract(1, x), add(1, x))))


@_float_composite
def arccos(x: Array) -> Array:
    return arctan2(sqrt(multiply(subtract(1, x), add(1, x))), x)


@_float_composite
def arcsinh(x: Array) -> Array:
    """Odd; ``log1p(a + a²/(1 + sqrt(1 + a²)))`` for ``|x| <= 1``, ``log(a) + log(1 + sqrt(1 + a⁻²))`` above."""
    a = abs(x)
    small = log1p(add(a, divide(multiply(a, a), add(1, sqrt(add(1, multiply(a, a)))))))
    large = add(log(a), log(add(1, sqrt(add(1, power(divide(1, a), 2))))))
    r = where(less_equal(a, 1), small, large)
    return where(less(x, 0), negative(r), r)


@_float_composite
def arccosh(x: Array) -> Array:
    """``log1p(t + sqrt(t(t + 2)))`` with ``t = x - 1`` up to 2, ``log(x) + log(1 + sqrt(1 - x⁻²))`` above."""
    t = subtract(x, 1)
    small = log1p(add(t, sqrt(multiply(t, add(t, 2)))))
    large = add(log(x), log(add(1, sqrt(subtract(1, power(divide(1, x), 2))))))
    return where(less_equal(x, 2), small, large)


@_float_composite
def arctanh(x: Array) -> Array:
    return multiply(log1p(divide(multiply(x, 2), subtract(1, x))), 0.5)


@_float_composite
def log2(x: Array) -> Array:
    return divide(log(x), math.log(2))


@_float_composite
def log10(x: Array) -> Array:
    return divide(log(x), math.log(10))


@_float_composite
def exp2(x: Array) -> Array:
    return exp(multiply(x, math.log(2)))


def _unary_same(prim: str, ints_identity: bool = False) -> Callable[[ArrayLike], Array]:
    def fn(x: ArrayLike) -> Array:
        x = asarray(x)
        if ints_identity and not dtype_of(x).is_float:
            return x
        return apply(prim, [x], {})

    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}``, result of the operand's dtype."
    return fn


floor = _unary_same("floor", ints_identity=True)
ceil = _unary_same("ceil", ints_identity=True)
round = _unary_same("round", ints_identity=True)  # noqa: A001 - NumPy's name
negative = _unary_same("neg")
abs = _unary_same("abs")  # noqa: A001 - NumPy's name
sign = _unary_same("sign")
logical_not = _unary_same("not")
bitwise_not = _unary_same("bitwise_not")


def trunc(x: ArrayLike) -> Array:
    """Round toward zero; integers are returned unchanged."""
    x = asarray(x)
    return where(less(x, 0), ceil(x), floor(x)) if dtype_of(x).is_float else x


def isnan(x: ArrayLike) -> Array:
    x = asarray(x)
    return apply("isnan", [x], {}) if dtype_of(x).is_float else full(_shape(x), False, DType.bool)


def isinf(x: ArrayLike) -> Array:
    x = asarray(x)
    return apply("isinf", [x], {}) if dtype_of(x).is_float else full(_shape(x), False, DType.bool)


def signbit(x: ArrayLike) -> Array:
    """Whether the sign bit is set: true for ``-0.0`` and negative NaNs, as well as below zero."""
    x = asarray(x)
    if dtype_of(x).is_float:
        return apply("signbit", [x], {})
    return less(x, 0) if dtype_of(x) is not DType.bool else full(_shape(x), False, DType.bool)


def _binary(
    prim: str, *, true_divide: bool = False, logical: bool = False
) -> Callable[[ArrayLike, ArrayLike], Array]:
    def fn(a: ArrayLike, b: ArrayLike) -> Array:
        dtype = result_type(a, b)
        if true_divide:
            dtype = _as_float(dtype)
        if logical:
            a, b = astype(a, DType.bool), astype(b, DType.bool)
            dtype = DType.bool
        return apply(prim, _operands(a, b, dtype=dtype), {})

    fn.__name__ = prim
    fn.__doc__ = f"Elementwise ``{prim}`` with torch type promotion and NumPy broadcasting."
    return fn


add = _binary("add")
subtract = _binary("sub")
multiply = _binary("mul")
divide = _binary("div", true_divide=True)
power = _binary("pow")
maximum = _binary("maximum")
minimum = _binary("minimum")
remainder = _binary("remainder")
fmod = _binary("fmod")
floor_divide = _binary("floor_divide")
arctan2 = _binary("atan2", true_divide=True)
logical_and = _binary("and", logical=True)
logical_or = _binary("or", logical=True)
logical_xor = _binary("xor", logical=True)
bitwise_and = _binary("bitwise_and")
bitwise_or = _binary("bitwise_or")
bitwise_xor = _binary("bitwise_xor")
equal = _binary("eq")
not_equal = _binary("ne")
less = _binary("lt")
less_equal = _binary("le")
greater = _binary("gt")
greater_equal = _binary("ge")


def polyval(coefficients: Sequence[Scalar], x: ArrayLike) -> Array:
    """NumPy's ``polyval``: the polynomial with ``coefficients`` (highest degree first, at least
    two) at ``x``, by Horner's rule."""
    if len(coefficients) < 2:
        raise ValueError("polyval needs the coefficients of a polynomial of degree >= 1")
    result = add(multiply(x, coefficients[0]), coefficients[1])
    for c in coefficients[2:]:
        result = add(multiply(result, x), c)
    return result


def where(cond: ArrayLike, a: ArrayLike, b: ArrayLike) -> Array:
    dtype = result_type(a, b)
    cond, a, b = _lift([astype(cond, DType.bool), astype(a, dtype), astype(b, dtype)])
    shape = np.broadcast_shapes(_shape(cond), _shape(a), _shape(b))
    return apply(
        "select", [broadcast_to(cond, shape), broadcast_to(a, shape), broadcast_to(b, shape)], {}
    )


# -- shape ------------------------------------------------------------------------------------


def _axis(axis: int, rank: int) -> int:
    if not -builtins.max(rank, 1) <= axis < builtins.max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis % builtins.max(rank, 1)


def reshape(x: ArrayLike, shape: Sequence[int] | int) -> Array:
    x = asarray(x)
    shape = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        total = math.prod(_shape(x))
        shape = tuple(total // known if d == -1 and known else d for d in shape)
    if shape == _shape(x):
        return x
    return apply("reshape", [x], {"shape": shape})


def transpose(x: ArrayLike, axes: Sequence[int] | None = None) -> Array:
    x = asarray(x)
    rank = len(_shape(x))
    perm = tuple(reversed(range(rank))) if axes is None else tuple(_axis(a, rank) for a in axes)
    if perm == tuple(range(rank)):
        return x
    return apply("transpose", [x], {"perm": perm})


def expand_dims(x: ArrayLike, axis: int) -> Array:
    shape = list(_shape(x))
    shape.insert(_axis(axis, len(shape) + 1), 1)
    return reshape(x, shape)


def squeeze(x: ArrayLike, axis: int | Sequence[int] | None = None) -> Array:
    shape = _shape(x)
    if axis is None:
        axes = {i for i, d in enumerate(shape) if d == 1}
    else:
        axes = {_axis(a, len(shape)) for a in ((axis,) if isinstance(axis, int) else axis)}
    return reshape(x, [d for i, d in enumerate(shape) if not (i in axes and d == 1)])


def flip(x: ArrayLike, axis: int | Sequence[int] | None = None) -> Array:
    """Reverse the order of elements along ``axis`` (all axes if ``None``)."""
    x = asarray(x)
    axes = tuple(a for a in _axes(axis, len(_shape(x))) if _shape(x)[a] > 1)
    return apply("reverse", [x], {"axes": axes}) if axes else x


def concatenate(xs: Sequence[ArrayLike], axis: int = 0) -> Array:
    dtype = result_type(*xs)
    arrays = [astype(x, dtype) for x in xs]
    # Like torch, skip empty 1-D operands (legacy placeholders) whatever the others' rank.
    arrays = [a for a in arrays if _shape(a) != (0,)] or arrays[:1]
    if len(arrays) == 1:
        return arrays[0]
    return apply("concatenate", arrays, {"axis": _axis(axis, len(_shape(arrays[0])))})


def stack(xs: Sequence[ArrayLike], axis: int = 0) -> Array:
    rank = len(_shape(xs[0])) + 1
    return concatenate([expand_dims(x, _axis(axis, rank)) for x in xs], axis=axis)


def pad(x: ArrayLike, pad_width: Sequence[tuple[int, int]], constant_values: Scalar = 0) -> Array:
    """Constant padding; negative widths crop, as torch's ``constant_pad_nd`` allows."""
    x = asarray(x)
    shape = _shape(x)
    crop = tuple(
        slice(-lo if lo < 0 else 0, d + hi if hi < 0 else d)
        for d, (lo, hi) in zip(shape, pad_width)
    )
    x = _getitem(x, crop) if builtins.any(lo < 0 or hi < 0 for lo, hi in pad_width) else x
    low = tuple(builtins.max(lo, 0) for lo, _ in pad_width)
    high = tuple(builtins.max(hi, 0) for _, hi in pad_width)
    if not builtins.any(low) and not builtins.any(high):
        return x
    value = dtype_of(x).scalar(constant_values)
    return apply("pad", [x, value], {"low": low, "high": high})


def _getitem(x: Array, index: Any) -> Array:
    """Basic indexing (ints, slices with positive steps, ``None``, ``...``) and one integer array."""
    if not isinstance(index, tuple):
        index = (index,)
    shape = _shape(x)
    n_real = builtins.sum(1 for i in index if i is not None and i is not Ellipsis)
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (len(shape) - n_real) + index[at + 1 :]
    index = index + (slice(None),) * (len(shape) - builtins.sum(1 for i in index if i is not None))
    start, limit, stride, out_shape, gathers = [], [], [], [], []
    dim = 0
    for item in index:
        if item is None:
            out_shape.append(1)
            continue
        size = shape[dim]
        if isinstance(item, slice):
            s, e, k = item.indices(size)
            if k < 0:
                raise IndexError("knp indexing does not support negative steps; use knp.take")
            e = builtins.max(e, s)
            start.append(s)
            limit.append(e)
            stride.append(k)
            out_shape.append(-(-(e - s) // k))
        elif isinstance(item, (int, np.integer)):
            i = int(item) + size if item < 0 else int(item)
            if not 0 <= i < size:
                raise IndexError(f"index {item} is out of bounds for axis {dim} with size {size}")
            start.append(i)
            limit.append(i + 1)
            stride.append(1)
        else:
            start.append(0)
            limit.append(size)
            stride.append(1)
            gathers.append((len(out_shape), item))
            out_shape.append(size)
        dim += 1
    sliced = x
    if (tuple(start), tuple(limit), tuple(stride)) != ((0,) * len(shape), shape, (1,) * len(shape)):
        sliced = apply(
            "slice", [x], {"start": tuple(start), "limit": tuple(limit), "stride": tuple(stride)}
        )
    if len(gathers) > 1:
        raise IndexError("knp indexing supports one integer-array index; use knp.take repeatedly")
    sliced = reshape(sliced, out_shape)
    if gathers:
        ((axis, indices),) = gathers
        return take(sliced, indices, axis=axis)
    return sliced


# -- indexing ---------------------------------------------------------------------------------


def take(x: ArrayLike, indices: ArrayLike, axis: int = 0) -> Array:
    x = asarray(x)
    indices = asarray(indices)
    if not dtype_of(indices).is_integer:
        raise TypeError(f"take: indices must be integers, got {dtype_of(indices).value}")
    return apply("take", [x, indices], {"axis": _axis(axis, len(_shape(x)))})


def take_along_axis(x: ArrayLike, indices: ArrayLike, axis: int) -> Array:
    x, indices = asarray(x), asarray(indices)
    return apply("take_along_axis", [x, indices], {"axis": _axis(axis, len(_shape(x)))})


def scatter_add(x: ArrayLike, indices: ArrayLike, updates: ArrayLike, axis: int = 0) -> Array:
    """``x`` with ``updates`` added at 1-D ``indices`` along ``axis``; duplicates accumulate."""
    x = asarray(x)
    updates = astype(updates, dtype_of(x))
    return apply(
        "scatter_add", [x, asarray(indices), updates], {"axis": _axis(axis, len(_shape(x)))}
    )


def scatter_reduce(
    x: ArrayLike, indices: ArrayLike, updates: ArrayLike, kind: str, axis: int = 0
) -> Array:
    """``x`` with ``updates`` combined in at 1-D ``indices`` along ``axis`` by ``kind``: ``"max"``,
    ``"min"`` (NaN propagates) or ``"prod"``; a position hit several times combines them all."""
    x = asarray(x)
    updates = astype(updates, dtype_of(x))
    params = {"axis": _axis(axis, len(_shape(x))), "kind": kind}
    return apply("scatter_reduce", [x, asarray(indices), updates], params)


# -- contraction and reduction ----------------------------------------------------------------


def matmul(a: ArrayLike, b: ArrayLike) -> Array:
    """NumPy ``matmul``: 1-D operands are promoted to matrices, batch dimensions broadcast."""
    dtype = result_type(a, b)
    a, b = _lift([astype(a, dtype), astype(b, dtype)])
    a_vec, b_vec = len(_shape(a)) == 1, len(_shape(b)) == 1
    if a_vec:
        a = reshape(a, (1, _shape(a)[0]))
    if b_vec:
        b = reshape(b, (_shape(b)[0], 1))
    batch = np.broadcast_shapes(_shape(a)[:-2], _shape(b)[:-2])
    a = broadcast_to(a, batch + _shape(a)[-2:])
    b = broadcast_to(b, batch + _shape(b)[-2:])
    out = apply("dot", [a, b], {})
    if a_vec or b_vec:
        shape = _shape(out)
        out = reshape(out, shape[:-2] + shape[-2:-1] * (not a_vec) + shape[-1:] * (not b_vec))
    return out


def conv(
    x: ArrayLike,
    w: ArrayLike,
    *,
    stride: Sequence[int] | None = None,
    padding: Sequence[tuple[int, int]] | None = None,
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    groups: int = 1,
) -> Array:
    """Convolution (cross-correlation, as ``torch.nn.functional.conv*d``) of ``x (N, C, *S)``
    with ``w (O, C/groups, *K)``: ``padding`` is ``(low, high)`` per spatial dim (negative
    crops), ``lhs_dilation`` spreads ``x`` (a transposed convolution), ``rhs_dilation`` spreads
    ``w``. One primitive, so that a compiler with convolution units (XLA, neuronx-cc) sees one;
    every argument defaults to 1 (no padding)."""
    return _convolution(
        "conv", x, w, stride, padding, groups, lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation
    )


def conv_transpose(
    x: ArrayLike,
    w: ArrayLike,
    *,
    stride: Sequence[int] | None = None,
    padding: Sequence[tuple[int, int]] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    groups: int = 1,
) -> Array:
    """The adjoint of ``conv(·, w, stride=..., padding=..., rhs_dilation=..., groups=...)`` in
    its input, from ``x (N, O, *S)`` to ``(N, C, *extent)`` with the forward weight
    ``w (O, C/groups, *K)``: the input gradient of that convolution, and torch's transposed
    convolution. ``extent`` is ``(S - 1) * stride + (K - 1) * rhs_dilation + 1 - low - high``:
    a ``high`` pad smaller than the forward one adds result positions past the last window
    (torch's ``output_padding``). One primitive, so each runtime picks its form: a compiler
    with convolution units sees a convolution of the reversed weight; the ``cpu`` runtime
    multiplies by the weight as it lies and sums the taps into place."""
    return _convolution("conv_transpose", x, w, stride, padding, groups, rhs_dilation=rhs_dilation)


def _convolution(prim: str, x: ArrayLike, w: ArrayLike, stride, padding, groups, **dilations):
    """``prim`` of ``x`` and ``w`` in one type, each per-dim argument spelled out (1 where
    ``None``; no padding where ``padding`` is ``None``)."""
    dtype = result_type(x, w)
    x, w = _lift([astype(x, dtype), astype(w, dtype)])
    ones = (1,) * (len(_shape(x)) - 2)
    pads = tuple(padding) if padding is not None else ((0, 0),) * len(ones)
    params = {
        "stride": tuple(int(v) for v in (stride or ones)),
        "low": tuple(int(lo) for lo, _ in pads),
        "high": tuple(int(hi) for _, hi in pads),
        **{k: tuple(int(v) for v in (d or ones)) for k, d in dilations.items()},
        "groups": int(groups),
    }
    return apply(prim, [x, w], params)


def _axes(axis: int | Sequence[int] | None, rank: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(rank))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else axis
    return tuple(sorted({_axis(int(a), rank) for a in axes}))


def _reduce(kind: str, x: ArrayLike, axis, keepdims: bool, dtype: Any = None) -> Array:
    x = asarray(x)
    if dtype is not None:
        x = astype(x, dtype)
    elif kind in ("sum", "prod") and not dtype_of(x).is_float:
        x = astype(x, DType.i64)
    axes = _axes(axis, len(_shape(x)))
    if kind in ("any", "all"):
        x = astype(x, DType.bool)
    return apply("reduce", [x], {"kind": kind, "axes": axes, "keepdims": bool(keepdims)})


def sum(x: ArrayLike, axis=None, keepdims: bool = False, dtype: Any = None) -> Array:  # noqa: A001
    return _reduce("sum", x, axis, keepdims, dtype)


def prod(x: ArrayLike, axis=None, keepdims: bool = False, dtype: Any = None) -> Array:
    return _reduce("prod", x, axis, keepdims, dtype)


def max(x: ArrayLike, axis=None, keepdims: bool = False) -> Array:  # noqa: A001
    return _reduce("max", x, axis, keepdims)


def min(x: ArrayLike, axis=None, keepdims: bool = False) -> Array:  # noqa: A001
    return _reduce("min", x, axis, keepdims)


def any(x: ArrayLike, axis=None, keepdims: bool = False) -> Array:  # noqa: A001
    return _reduce("any", x, axis, keepdims)


def all(x: ArrayLike, axis=None, keepdims: bool = False) -> Array:  # noqa: A001
    return _reduce("all", x, axis, keepdims)


def mean(x: ArrayLike, axis=None, keepdims: bool = False, dtype: Any = None) -> Array:
    """Mean; half floats accumulate and divide in f32 and round once, as torch does."""
    x = asarray(x)
    out_dtype = to_dtype(dtype) if dtype is not None else _float_dtype(x)
    compute = DType.f32 if out_dtype.is_half else out_dtype
    axes = _axes(axis, len(_shape(x)))
    count = math.prod(_shape(x)[a] for a in axes)
    total = sum(astype(x, compute), axis=axes, keepdims=keepdims)
    return astype(divide(total, np.asarray(count, dtype=compute.numpy)), out_dtype)


def _argreduce(kind: str, x: ArrayLike, axis: int | None, keepdims: bool) -> Array:
    x = asarray(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
        keepdims = False
    return apply(
        "argreduce",
        [x],
        {"kind": kind, "axis": _axis(axis, len(_shape(x))), "keepdims": bool(keepdims)},
    )


def argmax(x: ArrayLike, axis: int | None = None, keepdims: bool = False) -> Array:
    return _argreduce("argmax", x, axis, keepdims)


def argmin(x: ArrayLike, axis: int | None = None, keepdims: bool = False) -> Array:
    return _argreduce("argmin", x, axis, keepdims)


def cumsum(x: ArrayLike, axis: int, dtype: Any = None) -> Array:
    x = asarray(x) if dtype is None else astype(x, dtype)
    return apply("cumulative", [x], {"kind": "cumsum", "axis": _axis(axis, len(_shape(x)))})


def cumprod(x: ArrayLike, axis: int, dtype: Any = None) -> Array:
    x = asarray(x) if dtype is None else astype(x, dtype)
    return apply("cumulative", [x], {"kind": "cumprod", "axis": _axis(axis, len(_shape(x)))})


def cummax(x: ArrayLike, axis: int) -> Array:
    """Running maximum along ``axis``; once a NaN is seen the result stays NaN."""
    x = asarray(x)
    return apply("cumulative", [x], {"kind": "cummax", "axis": _axis(axis, len(_shape(x)))})


def cummin(x: ArrayLike, axis: int) -> Array:
    """Running minimum along ``axis``; once a NaN is seen the result stays NaN."""
    x = asarray(x)
    return apply("cumulative", [x], {"kind": "cummin", "axis": _axis(axis, len(_shape(x)))})


def sort(x: ArrayLike, axis: int = -1, descending: bool = False) -> Array:
    x = asarray(x)
    params = {"axis": _axis(axis, len(_shape(x))), "descending": bool(descending), "indices": False}
    return apply("sort", [x], params)


def argsort(x: ArrayLike, axis: int = -1, descending: bool = False) -> Array:
    x = asarray(x)
    params = {"axis": _axis(axis, len(_shape(x))), "descending": bool(descending), "indices": True}
    return apply("sort", [x], params)


# -- sources ----------------------------------------------------------------------------------


def arange(n: int, dtype: Any = DType.i64) -> Array:
    """``0 … n-1``; inside a lowering it becomes an ``iota``, elsewhere a NumPy array."""
    return apply("iota", [], {"shape": (int(n),), "dtype": to_dtype(dtype), "axis": 0})


def full(shape: Sequence[int], value: Scalar, dtype: Any = None) -> Array:
    """A filled array; inside a lowering it becomes a broadcast scalar constant."""
    target = to_dtype(dtype) if dtype is not None else result_type(value)
    scalar = apply("constant", [], {"value": _constant(target.scalar(value), target)})
    return broadcast_to(scalar, tuple(int(d) for d in shape))


def zeros(shape: Sequence[int], dtype: Any = DType.f32) -> Array:
    return full(shape, 0, dtype)


def ones(shape: Sequence[int], dtype: Any = DType.f32) -> Array:
    return full(shape, 1, dtype)


def random_bits(state: ArrayLike, shape: Sequence[int]) -> Array:
    """u32 Philox4x32-10 random words of ``shape`` for the u32[4] ``state`` (key low, key high,
    counter low, counter high).

    A pure function of ``state``: the same state gives the same words, so draw from
    ``random_state(state, shape)`` next (or from ``LoweringContext.random_bits`` in a rule).
    """
    params = {"shape": tuple(int(d) for d in shape), "part": "bits"}
    return apply("random_bits", [asarray(state, DType.u32)], params)


def random_state(state: ArrayLike, shape: Sequence[int]) -> Array:
    """The state after ``random_bits(state, shape)``: the counter advanced past its words."""
    params = {"shape": tuple(int(d) for d in shape), "part": "state"}
    return apply("random_bits", [asarray(state, DType.u32)], params)


# -- collectives ------------------------------------------------------------------------------
# ``groups``: replica groups, a sequence of sequences of global ranks (one size, every rank once);
# see docs/primitives.md. With NumPy arrays a group of one rank is the identity.


def _groups(groups: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(r) for r in g) for g in groups)


def all_reduce(x: Array, op: str, groups: Sequence[Sequence[int]]) -> Array:
    """Each rank's ``x`` combined over its group by ``op`` (``sum``, ``prod``, ``max``, ``min``)."""
    return apply("all_reduce", [x], {"op": op, "groups": _groups(groups)})


def all_gather(x: Array, axis: int, groups: Sequence[Sequence[int]]) -> Array:
    """The group's ``x`` concatenated along ``axis``, in the order the group lists its ranks."""
    return apply(
        "all_gather", [x], {"axis": _axis(axis, len(_shape(x))), "groups": _groups(groups)}
    )


def reduce_scatter(x: Array, op: str, axis: int, groups: Sequence[Sequence[int]]) -> Array:
    """``all_reduce`` then this rank's block along ``axis`` (block i for the group's i-th rank)."""
    return apply(
        "reduce_scatter",
        [x],
        {"op": op, "axis": _axis(axis, len(_shape(x))), "groups": _groups(groups)},
    )


def all_to_all(
    x: Array, split_axis: int, concat_axis: int, groups: Sequence[Sequence[int]]
) -> Array:
    """Block i of every rank's ``x`` (split along ``split_axis``) goes to the group's i-th rank,
    which concatenates what it receives along ``concat_axis`` in group order."""
    rank = len(_shape(x))
    params = {"split_axis": _axis(split_axis, rank), "concat_axis": _axis(concat_axis, rank)}
    return apply("all_to_all", [x], {**params, "groups": _groups(groups)})


def collective_broadcast(x: Array, source: int, groups: Sequence[Sequence[int]]) -> Array:
    """The ``x`` of the rank at position ``source`` of each group, on every rank of that group."""
    return apply("collective_broadcast", [x], {"source": int(source), "groups": _groups(groups)})


def custom_call(
    operands: Sequence[Array],
    *,
    target: str,
    config: str,
    host: str,
    shape: Sequence[int],
    dtype: Any,
) -> Array:
    """A kernel from elsewhere applied to ``operands``, giving one ``dtype[shape]`` result.

    ``target`` and ``config`` become the HLO ``custom_call_target`` and ``backend_config`` the
    device compiler replaces with that kernel; ``host`` (``"module:function"``, called as
    ``fn(config, *arrays) -> array``) computes the same result with NumPy for the cpu runtime.
    Runtimes that can run neither decline the node, which then runs as torch (see
    ``Runtime.custom_call_targets``).
    """
    params = {
        "target": target,
        "config": Opaque(config),
        "host": host,
        "shape": tuple(int(d) for d in shape),
        "dtype": to_dtype(dtype),
    }
    return apply("custom_call", list(operands), params)


def _constant(array: np.ndarray, dtype: DType) -> ConstantData:
    return ConstantData.from_array(array, dtype)


# -- operators on traced tensors --------------------------------------------------------------


def _reflect(fn):
    return lambda self, other: fn(other, self)


for _name, _fn in {
    "add": add,
    "sub": subtract,
    "mul": multiply,
    "truediv": divide,
    "floordiv": floor_divide,
    "mod": remainder,
    "pow": power,
    "matmul": matmul,
    "and": bitwise_and,
    "or": bitwise_or,
    "xor": bitwise_xor,
}.items():
    setattr(Traced, f"__{_name}__", _fn)
    setattr(Traced, f"__r{_name}__", _reflect(_fn))
for _name, _fn in {
    "lt": less,
    "le": less_equal,
    "gt": greater,
    "ge": greater_equal,
    "eq": equal,
    "ne": not_equal,
}.items():
    setattr(Traced, f"__{_name}__", _fn)
for _attr, _value in {
    "__hash__": object.__hash__,
    "__neg__": negative,
    "__abs__": abs,
    "__invert__": lambda self: (
        logical_not(self) if dtype_of(self) is DType.bool else bitwise_not(self)
    ),
    "__getitem__": _getitem,
    "astype": astype,
    "reshape": lambda self, *shape: reshape(
        self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
    ),
    "transpose": lambda self, *axes: transpose(self, axes or None),
    "T": property(lambda self: transpose(self)),
    "sum": sum,
    "max": max,
    "min": min,
    "mean": mean,
}.items():
    setattr(Traced, _attr, _value)

del _name, _fn, _attr, _value
