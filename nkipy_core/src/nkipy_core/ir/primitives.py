"""The closed set of NKIPy primitives: type inference and NumPy semantics for each.

Every primitive has exactly two definitions here: ``infer`` (operand types and attributes to
result type; raises ``TypeError`` on ill-typed use) and ``emit`` (a NumPy expression over operand
names). The NumPy expression is the primitive's reference semantics: the cpu runtime executes it,
``kernel.py`` shows it, constant folding evaluates it and lowering rules run on it when given
NumPy arrays. ``docs/primitives.md`` is generated from the same table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from nkipy_core.ir.types import DType, TensorType

Infer = Callable[..., TensorType]
Emit = Callable[..., str]


@attrs.frozen
class Primitive:
    name: str
    arity: int | None  # None: variadic
    infer: Infer
    emit: Emit
    doc: str
    #: computes in f32 on half inputs and rounds the result, the way torch's CPU kernels do
    half_compute: bool = False
    #: exchanges data between ranks: its value depends on other processes
    collective: bool = False
    #: constant folding may evaluate it at compile time (not collectives nor custom calls, whose
    #: value is computed elsewhere: by the other ranks, or by a kernel the runtime brings)
    folds: bool = True
    #: elementwise over operands of one shape, so NumPy's implicit broadcasting of smaller operands
    #: gives the same values: generated code passes a ``broadcast``'s operand instead of its result
    broadcasting: bool = False
    #: the NumPy ufunc ``emit`` amounts to, called on the operands alone (``"np.add"``): generated
    #: code may then pass it ``out=``, a buffer no other value needs any more (``codegen``)
    ufunc: str | None = None


PRIMITIVES: dict[str, Primitive] = {}


def _define(
    name: str,
    arity: int | None,
    infer: Infer,
    emit: Emit,
    doc: str,
    half: bool = False,
    collective: bool = False,
    folds: bool = True,
    broadcasting: bool = False,
    ufunc: str | None = None,
):
    PRIMITIVES[name] = Primitive(
        name,
        arity,
        infer,
        emit,
        doc,
        half,
        collective,
        folds and not collective,
        broadcasting,
        ufunc,
    )


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise TypeError(message)


def _same_types(name: str, types: Sequence[TensorType]) -> None:
    first = types[0]
    for t in types[1:]:
        _check(t == first, f"{name}: operand types differ: {first} vs {t}")


def _norm_axis(axis: int, rank: int, name: str) -> int:
    _check(-rank <= axis < max(rank, 1), f"{name}: axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


# -- elementwise ----------------------------------------------------------------------------

_UNARY_FLOAT = {
    "exp": "np.exp({0})",
    "log": "np.log({0})",
    "log1p": "np.log1p({0})",
    "expm1": "np.expm1({0})",
    "sqrt": "np.sqrt({0})",
    "rsqrt": "1 / np.sqrt({0})",
    "sin": "np.sin({0})",
    "cos": "np.cos({0})",
    "tan": "np.tan({0})",
    "tanh": "np.tanh({0})",
    "atan": "np.arctan({0})",
    "logistic": "1 / (1 + np.exp(-{0}))",
    "erf": "_erf({0})",
    "erfc": "_erfc({0})",
    "floor": "np.floor({0})",
    "ceil": "np.ceil({0})",
    "round": "np.round({0})",
    "isnan": "np.isnan({0})",
    "isinf": "np.isinf({0})",
    "signbit": "np.signbit({0})",
}
_UNARY_NUMERIC = {"neg": "-{0}", "abs": "np.abs({0})", "sign": "np.sign({0})"}
_UNARY_LOGICAL = {"not": "np.logical_not({0})", "bitwise_not": "np.invert({0})"}
#: unary primitives whose result is pred
_PREDICATES = ("isnan", "isinf", "signbit", "not")
#: the ufuncs of the elementwise primitives not written as ``np.<ufunc>(...)`` (``_ufunc``)
_OPERATOR_UFUNCS = {
    "neg": "np.negative",
    "add": "np.add",
    "sub": "np.subtract",
    "mul": "np.multiply",
    "div": "np.divide",
}


def _ufunc(name: str, fmt: str) -> str | None:
    """The ufunc of an elementwise primitive whose NumPy form is one ufunc call on its operands
    (``np.exp({0})``, ``{0} + {1}``); None for a composite form (``1 / np.sqrt({0})``) and for
    ``np.round``, which is not a ufunc."""
    if name in _OPERATOR_UFUNCS:
        return _OPERATOR_UFUNCS[name]
    call = re.fullmatch(r"(np\.\w+)\(\{0\}(?:, \{1\})?\)", fmt)
    if call and isinstance(getattr(np, call.group(1)[3:], None), np.ufunc):
        return call.group(1)
    return None


def _infer_unary(name: str, kind: str) -> Infer:
    def infer(x: TensorType) -> TensorType:
        if kind == "float":
            _check(x.dtype.is_float, f"{name} needs a float operand, got {x}")
        if kind == "numeric":
            _check(x.dtype is not DType.bool, f"{name} needs a numeric operand, got {x}")
        if name in _PREDICATES:
            return TensorType(x.shape, DType.bool)
        return x

    return infer


for _table, _kind in (
    (_UNARY_FLOAT, "float"),
    (_UNARY_NUMERIC, "numeric"),
    (_UNARY_LOGICAL, "any"),
):
    for _name, _fmt in _table.items():
        _define(
            _name,
            1,
            _infer_unary(_name, _kind),
            (lambda fmt: lambda x: fmt.format(x))(_fmt),
            f"elementwise `{_fmt.format('x')}`",
            half=_kind != "any" and _name not in _PREDICATES,
            ufunc=_ufunc(_name, _fmt),
        )

_BINARY_ARITH = {
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "mul": "{0} * {1}",
    "div": "{0} / {1}",
    "pow": "np.power({0}, {1})",
    "maximum": "np.maximum({0}, {1})",
    "minimum": "np.minimum({0}, {1})",
    "remainder": "np.remainder({0}, {1})",
    "fmod": "np.fmod({0}, {1})",
    "floor_divide": "np.floor_divide({0}, {1})",
    "atan2": "np.arctan2({0}, {1})",
}
_BINARY_LOGICAL = {
    "and": "np.logical_and({0}, {1})",
    "or": "np.logical_or({0}, {1})",
    "xor": "np.logical_xor({0}, {1})",
    "bitwise_and": "np.bitwise_and({0}, {1})",
    "bitwise_or": "np.bitwise_or({0}, {1})",
    "bitwise_xor": "np.bitwise_xor({0}, {1})",
}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _infer_binary(name: str) -> Infer:
    def infer(a: TensorType, b: TensorType) -> TensorType:
        _same_types(name, (a, b))
        if name in _BINARY_ARITH:
            _check(a.dtype is not DType.bool, f"{name} needs numeric operands, got {a}")
        if name in ("div", "atan2"):
            _check(a.dtype.is_float, f"{name} needs float operands, got {a}; convert first")
        if name in ("and", "or", "xor"):
            return TensorType(a.shape, DType.bool)
        if name.startswith("bitwise"):
            _check(not a.dtype.is_float, f"{name} needs integer or bool operands, got {a}")
        if name in _COMPARE:
            return TensorType(a.shape, DType.bool)
        return a

    return infer


for _name, _fmt in {**_BINARY_ARITH, **_BINARY_LOGICAL}.items():
    _define(
        _name,
        2,
        _infer_binary(_name),
        (lambda fmt: lambda a, b: fmt.format(a, b))(_fmt),
        f"elementwise `{_fmt.format('a', 'b')}`; operands of one type and shape",
        half=_name in _BINARY_ARITH,
        broadcasting=True,
        ufunc=_ufunc(_name, _fmt),
    )
for _name, _sym in _COMPARE.items():
    _define(
        _name,
        2,
        _infer_binary(_name),
        (lambda sym: lambda a, b: f"{a} {sym} {b}")(_sym),
        f"elementwise `a {_sym} b` giving pred",
        broadcasting=True,
    )


def _infer_select(pred: TensorType, a: TensorType, b: TensorType) -> TensorType:
    _check(pred.dtype is DType.bool, f"select: predicate must be pred, got {pred}")
    _same_types("select", (a, b))
    _check(
        pred.shape == a.shape, f"select: predicate shape {pred.shape} != operand shape {a.shape}"
    )
    return a


_define(
    "select",
    3,
    _infer_select,
    lambda p, a, b: f"np.where({p}, {a}, {b})",
    "`np.where(pred, a, b)`; all three of one shape",
    broadcasting=True,
)


def _infer_convert(x: TensorType, *, dtype: DType) -> TensorType:
    return TensorType(x.shape, dtype)


_define(
    "convert",
    1,
    _infer_convert,
    lambda x, dtype: f"{x}.astype({dtype.numpy_name})",
    "element type conversion (`x.astype(dtype)`), float to int truncates toward zero; f64, i64 "
    "and i32 become f16/bf16 through f32 (rounded twice), as torch converts them",
)


# -- shape ----------------------------------------------------------------------------------


def _infer_broadcast(x: TensorType, *, shape: tuple[int, ...]) -> TensorType:
    _check(len(shape) >= x.rank, f"broadcast: cannot broadcast {x} to lower rank {shape}")
    for have, want in zip(reversed(x.shape), reversed(shape)):
        _check(have in (1, want), f"broadcast: {x} is not broadcastable to {list(shape)}")
    return TensorType(shape, x.dtype)


_define(
    "broadcast",
    1,
    _infer_broadcast,
    lambda x, shape: f"np.broadcast_to({x}, {tuple(shape)})",
    "NumPy broadcasting to `shape` (trailing dimensions aligned)",
)


def _infer_reshape(x: TensorType, *, shape: tuple[int, ...]) -> TensorType:
    new = TensorType(shape, x.dtype)
    _check(all(d >= 0 for d in shape), f"reshape: negative dimension in {list(shape)}")
    _check(new.size == x.size, f"reshape: cannot reshape {x} ({x.size} elements) to {list(shape)}")
    return new


_define(
    "reshape",
    1,
    _infer_reshape,
    lambda x, shape: f"{x}.reshape({tuple(shape)})",
    "row-major reshape; element count preserved",
)


def _infer_transpose(x: TensorType, *, perm: tuple[int, ...]) -> TensorType:
    _check(
        sorted(perm) == list(range(x.rank)),
        f"transpose: {list(perm)} is not a permutation of rank {x.rank}",
    )
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype)


_define(
    "transpose",
    1,
    _infer_transpose,
    lambda x, perm: f"{x}.transpose({tuple(perm)})",
    "permute dimensions: result dim i is operand dim perm[i]",
)


def _infer_reverse(x: TensorType, *, axes: tuple[int, ...]) -> TensorType:
    _check(
        len(set(axes)) == len(axes) and all(0 <= a < x.rank for a in axes),
        f"reverse: axes {list(axes)} are not distinct dims of rank {x.rank}",
    )
    return x


_define(
    "reverse",
    1,
    _infer_reverse,
    lambda x, axes: f"np.flip({x}, {tuple(axes)})",
    "reverse the order of elements along `axes` (`np.flip`: a view on the `cpu` runtime)",
)


def _infer_slice(x: TensorType, *, start: tuple, limit: tuple, stride: tuple) -> TensorType:
    _check(
        len(start) == len(limit) == len(stride) == x.rank,
        f"slice: start/limit/stride need rank {x.rank}",
    )
    shape = []
    for d, (s, e, k) in enumerate(zip(start, limit, stride)):
        _check(
            k >= 1 and 0 <= s <= e <= x.shape[d],
            f"slice: bad bounds {s}:{e}:{k} for dim {d} of {x}",
        )
        shape.append(max(0, -(-(e - s) // k)))
    return TensorType(tuple(shape), x.dtype)


def _emit_slice(x: str, *, start: tuple, limit: tuple, stride: tuple) -> str:
    parts = [f"{s}:{e}" + (f":{k}" if k != 1 else "") for s, e, k in zip(start, limit, stride)]
    return f"{x}[{', '.join(parts)}]" if parts else x


_define("slice", 1, _infer_slice, _emit_slice, "static strided slice `x[start:limit:stride, ...]`")


def _infer_concatenate(*xs: TensorType, axis: int) -> TensorType:
    _check(len(xs) >= 1, "concatenate: needs at least one operand")
    first = xs[0]
    _check(0 <= axis < first.rank, f"concatenate: axis {axis} out of range for {first}")
    for x in xs[1:]:
        _check(
            x.dtype == first.dtype and x.rank == first.rank,
            f"concatenate: {x} does not match {first}",
        )
        _check(
            all(a == b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != axis),
            f"concatenate: {x} and {first} differ outside axis {axis}",
        )
    shape = list(first.shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return TensorType(tuple(shape), first.dtype)


_define(
    "concatenate",
    None,
    _infer_concatenate,
    lambda *xs, axis: f"np.concatenate([{', '.join(xs)}], axis={axis})",
    "join operands along `axis`",
)


def _infer_pad(x: TensorType, value: TensorType, *, low: tuple, high: tuple) -> TensorType:
    _check(
        value.shape == () and value.dtype == x.dtype,
        f"pad: value must be a {x.dtype.value} scalar, got {value}",
    )
    _check(len(low) == len(high) == x.rank, f"pad: low/high need rank {x.rank}")
    _check(all(p >= 0 for p in (*low, *high)), "pad: negative padding; use slice")
    return TensorType(tuple(d + lo + hi for d, lo, hi in zip(x.shape, low, high)), x.dtype)


_define(
    "pad",
    2,
    _infer_pad,
    lambda x, v, low, high: f"np.pad({x}, {tuple(zip(low, high))}, constant_values={v})",
    "constant padding with scalar operand `value`",
)


# -- indexing -------------------------------------------------------------------------------


def _infer_take(x: TensorType, idx: TensorType, *, axis: int) -> TensorType:
    _check(idx.dtype.is_integer, f"take: indices must be integers, got {idx}")
    _check(0 <= axis < x.rank, f"take: axis {axis} out of range for {x}")
    return TensorType(x.shape[:axis] + idx.shape + x.shape[axis + 1 :], x.dtype)


_define(
    "take",
    2,
    _infer_take,
    lambda x, i, axis: f"np.take({x}, {i}, axis={axis})",
    "gather whole slices: `np.take(x, indices, axis)`; indices in range",
)


def _infer_take_along(x: TensorType, idx: TensorType, *, axis: int) -> TensorType:
    _check(idx.dtype.is_integer, f"take_along_axis: indices must be integers, got {idx}")
    _check(idx.rank == x.rank and 0 <= axis < x.rank, f"take_along_axis: {idx} does not fit {x}")
    return TensorType(idx.shape, x.dtype)


_define(
    "take_along_axis",
    2,
    _infer_take_along,
    lambda x, i, axis: f"np.take_along_axis({x}, {i}, axis={axis})",
    "elementwise gather along one axis (`torch.gather`)",
)


def _infer_scatter(name: str) -> Infer:
    def infer(
        x: TensorType, idx: TensorType, upd: TensorType, *, axis: int, kind: str = "add"
    ) -> TensorType:
        _check(
            idx.dtype.is_integer and idx.rank == 1,
            f"{name}: indices must be 1-D integers, got {idx}",
        )
        _check(
            upd.dtype == x.dtype and upd.rank == x.rank, f"{name}: updates {upd} do not match {x}"
        )
        _check(
            upd.shape[axis] == idx.shape[0],
            f"{name}: updates {upd} need {idx.shape[0]} rows on axis {axis}",
        )
        _check(
            kind in (_SCATTER_KINDS if name == "scatter_reduce" else ("add",)),
            f"{name}: unknown kind {kind!r}",
        )
        return x

    return infer


def _scatter_index(i: str, axis: int) -> str:
    return "np.s_[{}]".format(", ".join([":"] * axis + [i]))


_define(
    "scatter_add",
    3,
    _infer_scatter("scatter_add"),
    lambda x, i, u, axis: f"_scatter_add({x}, {_scatter_index(i, axis)}, {u})",
    "`x` with `updates` added at 1-D `indices` along `axis` (duplicates accumulate, `index_add`)",
    half=True,
)

#: scatter_reduce kinds -> the NumPy ufunc whose ``at`` combines a position's old and new values
_SCATTER_KINDS = {"max": "np.maximum", "min": "np.minimum", "prod": "np.multiply"}

_define(
    "scatter_reduce",
    3,
    _infer_scatter("scatter_reduce"),
    lambda x, i, u, axis, kind: (
        f"_scatter_reduce({x}, {_scatter_index(i, axis)}, {u}, {_SCATTER_KINDS[kind]})"
    ),
    "`x` combined with `updates` at 1-D `indices` along `axis` by `kind` (`max`, `min` propagating "
    "NaN, `prod`); every update of a position counts (`index_reduce`, XLA's scatter with a combiner)",
    half=True,
)


# -- contraction and reduction --------------------------------------------------------------


def _infer_dot(a: TensorType, b: TensorType) -> TensorType:
    _check(a.dtype == b.dtype, f"dot: operand types differ: {a} vs {b}")
    _check(a.dtype is not DType.bool, "dot: operands must be numeric")
    _check(a.rank >= 2 and a.rank == b.rank, f"dot: needs equal ranks >= 2, got {a} and {b}")
    _check(a.shape[:-2] == b.shape[:-2], f"dot: batch dimensions differ: {a} vs {b}")
    _check(a.shape[-1] == b.shape[-2], f"dot: contraction mismatch: {a} @ {b}")
    return TensorType(a.shape[:-1] + b.shape[-1:], a.dtype)


_define(
    "dot",
    2,
    _infer_dot,
    lambda a, b: f"np.matmul({a}, {b})",
    "batched matrix product `a @ b` over equal leading batch dims",
    half=True,
    ufunc="np.matmul",
)


def _check_convolution(
    name: str, x: TensorType, w: TensorType, layout: str, per_dim: tuple, positive: tuple
) -> None:
    """What both convolutions ask of their operands: one numeric type, the ``layout`` ranks,
    an entry per spatial dim in each of ``per_dim``, and ``positive`` strides and dilations."""
    _check(
        x.dtype == w.dtype and x.dtype is not DType.bool,
        f"{name}: needs numeric operands of one type, got {x} and {w}",
    )
    spatial = x.rank - 2
    _check(spatial >= 1 and w.rank == x.rank, f"{name}: needs {layout}, got {x} and {w}")
    _check(
        all(len(t) == spatial for t in per_dim),
        f"{name}: stride, padding and dilations need {spatial} entries",
    )
    _check(all(v >= 1 for v in positive), f"{name}: strides, dilations and groups must be positive")


def _infer_conv(
    x: TensorType,
    w: TensorType,
    *,
    stride: tuple,
    low: tuple,
    high: tuple,
    lhs_dilation: tuple,
    rhs_dilation: tuple,
    groups: int,
) -> TensorType:
    _check_convolution(
        "conv",
        x,
        w,
        "(N, C, *S) and (O, C/groups, *K)",
        (stride, low, high, lhs_dilation, rhs_dilation),
        (*stride, *lhs_dilation, *rhs_dilation, groups),
    )
    _check(
        x.shape[1] == w.shape[1] * groups and w.shape[0] % groups == 0,
        f"conv: {groups} group(s) do not fit input {x} and weight {w}",
    )
    out = []
    for n, k, s, lo, hi, ld, rd in zip(
        x.shape[2:], w.shape[2:], stride, low, high, lhs_dilation, rhs_dilation
    ):
        extent = ((n - 1) * ld + 1 if n else 0) + lo + hi - ((k - 1) * rd + 1)
        _check(extent >= 0 or n == 0, f"conv: the kernel {w} is larger than the padded input {x}")
        out.append(max(extent // s + 1, 0) if n else 0)
    return TensorType((x.shape[0], w.shape[0], *out), x.dtype)


_define(
    "conv",
    2,
    _infer_conv,
    lambda x, w, stride, low, high, lhs_dilation, rhs_dilation, groups: (
        f"_conv({x}, {w}, {stride}, {low}, {high}, {lhs_dilation}, {rhs_dilation}, {groups})"
    ),
    "convolution of `x (N, C, *S)` with `w (O, C/groups, *K)` (cross-correlation, as torch's): "
    "`x` dilated by `lhs_dilation` and padded by `low`/`high` (negative crops), `w` dilated by "
    "`rhs_dilation`, windows every `stride`; XLA's `convolution` with one batch group",
    half=True,
)


def _infer_conv_transpose(
    x: TensorType,
    w: TensorType,
    *,
    stride: tuple,
    low: tuple,
    high: tuple,
    rhs_dilation: tuple,
    groups: int,
) -> TensorType:
    _check_convolution(
        "conv_transpose",
        x,
        w,
        "(N, O, *S) and (O, C/groups, *K)",
        (stride, low, high, rhs_dilation),
        (*stride, *rhs_dilation, groups),
    )
    _check(
        x.shape[1] == w.shape[0] and w.shape[0] % groups == 0,
        f"conv_transpose: {groups} group(s) do not fit input {x} and weight {w}",
    )
    out = [
        (n - 1) * s + (k - 1) * d + 1 - lo - hi
        for n, k, s, lo, hi, d in zip(x.shape[2:], w.shape[2:], stride, low, high, rhs_dilation)
    ]
    _check(all(e >= 0 for e in out), f"conv_transpose: padding {low}/{high} crops past {x}")
    return TensorType((x.shape[0], w.shape[1] * groups, *out), x.dtype)


_define(
    "conv_transpose",
    2,
    _infer_conv_transpose,
    lambda x, w, stride, low, high, rhs_dilation, groups: (
        f"_conv_transpose({x}, {w}, {stride}, {low}, {high}, {rhs_dilation}, {groups})"
    ),
    "the adjoint of `conv` in its input (the input gradient; torch's transposed convolution): "
    "`x (N, O, *S)` with the forward weight `w (O, C/groups, *K)`, of the `conv` with these "
    "`stride`, `low`/`high` padding, `rhs_dilation` and `groups` whose input extent is "
    "`(S - 1) * stride + (K - 1) * rhs_dilation + 1 - low - high`",
    half=True,
)

#: reduce kinds, each the ufunc whose ``reduce`` computes it: what ``ndarray.sum`` and the
#: others call, from a Python function of NumPy's (``np.sum`` adds a dispatch layer more)
_REDUCE_KINDS = {
    "sum": "add",
    "prod": "multiply",
    "max": "maximum",
    "min": "minimum",
    "any": "logical_or",
    "all": "logical_and",
}


def _infer_reduce(x: TensorType, *, kind: str, axes: tuple, keepdims: bool) -> TensorType:
    _check(kind in _REDUCE_KINDS, f"reduce: unknown kind {kind!r}")
    _check(
        all(0 <= a < x.rank for a in axes) and len(set(axes)) == len(axes),
        f"reduce: bad axes {axes} for {x}",
    )
    if kind in ("max", "min"):
        _check(all(x.shape[a] > 0 for a in axes), f"reduce: {kind} over an empty axis of {x}")
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes)
    dtype = DType.bool if kind in ("any", "all") else x.dtype
    return TensorType(shape, dtype)


def _emit_reduce(x: str, *, kind: str, axes: tuple, keepdims: bool) -> str:
    extra = f", dtype={x}.dtype" if kind in ("sum", "prod") else ""
    return f"np.{_REDUCE_KINDS[kind]}.reduce({x}, axis={tuple(axes)}, keepdims={keepdims}{extra})"


_define(
    "reduce",
    1,
    _infer_reduce,
    _emit_reduce,
    "reduction (`sum`, `prod`, `max`, `min`, `any`, `all`) over `axes`",
    half=True,
)


def _infer_argreduce(x: TensorType, *, kind: str, axis: int, keepdims: bool) -> TensorType:
    _check(kind in ("argmax", "argmin"), f"argreduce: unknown kind {kind!r}")
    _check(0 <= axis < x.rank and x.shape[axis] > 0, f"argreduce: bad axis {axis} for {x}")
    shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape) if keepdims or i != axis)
    return TensorType(shape, DType.i64)


_define(
    "argreduce",
    1,
    _infer_argreduce,
    lambda x, kind, axis, keepdims: (
        f"np.{kind}({x}, axis={axis}, keepdims={keepdims}).astype(np.int64)"
    ),
    "index of the first max/min along `axis` (NaN counts as max), i64",
)


def _infer_cumulative(x: TensorType, *, kind: str, axis: int) -> TensorType:
    _check(kind in _SCANS, f"cumulative: unknown kind {kind!r}")
    _check(0 <= axis < x.rank, f"cumulative: bad axis {axis} for {x}")
    return x


#: cumulative kinds -> NumPy; ``cummax``/``cummin`` propagate NaN (once seen, NaN stays), as torch's
_SCANS = {
    "cumsum": "np.cumsum({x}, axis={axis}, dtype={x}.dtype)",
    "cumprod": "np.cumprod({x}, axis={axis}, dtype={x}.dtype)",
    "cummax": "np.maximum.accumulate({x}, axis={axis})",
    "cummin": "np.minimum.accumulate({x}, axis={axis})",
}

_define(
    "cumulative",
    1,
    _infer_cumulative,
    lambda x, kind, axis: _SCANS[kind].format(x=x, axis=axis),
    "inclusive scan (`cumsum`, `cumprod`, `cummax`, `cummin`) along `axis`",
    half=True,
)


def _infer_sort(x: TensorType, *, axis: int, descending: bool, indices: bool) -> TensorType:
    _check(0 <= axis < x.rank, f"sort: bad axis {axis} for {x}")
    return TensorType(x.shape, DType.i64) if indices else x


def _emit_sort(x: str, *, axis: int, descending: bool, indices: bool) -> str:
    key = f"-{x}" if descending else x
    order = f"np.argsort({key}, axis={axis}, kind='stable')"
    return (
        f"{order}.astype(np.int64)" if indices else f"np.take_along_axis({x}, {order}, axis={axis})"
    )


_define(
    "sort",
    1,
    _infer_sort,
    _emit_sort,
    "stable sort along `axis`; `indices=True` gives the permutation (i64) instead of values",
)


# -- sources --------------------------------------------------------------------------------


def _infer_iota(*, shape: tuple, dtype: DType, axis: int) -> TensorType:
    _check(0 <= axis < len(shape), f"iota: axis {axis} out of range for shape {list(shape)}")
    return TensorType(shape, dtype)


def _emit_iota(*, shape: tuple, dtype: DType, axis: int) -> str:
    view = tuple(d if i == axis else 1 for i, d in enumerate(shape))
    return f"np.broadcast_to(np.arange({shape[axis]}, dtype={dtype.numpy_name}).reshape({view}), {tuple(shape)})"


_define("iota", 0, _infer_iota, _emit_iota, "`0, 1, 2, …` along `axis`, broadcast to `shape`")


def _infer_constant(*, value: Any) -> TensorType:
    return TensorType(value.shape, value.dtype)


def _emit_constant(*, value: Any) -> str:
    if value.array.size == 0:  # a literal `[]` would lose the shape
        return f"np.zeros({tuple(value.shape)}, dtype={value.dtype.numpy_name})"
    if len(value.data) <= 256:
        literal = np.array2string(
            value.array, separator=", ", threshold=10**6, floatmode="unique"
        ).replace("\n", "")
        if value.dtype.is_float:
            literal = literal.replace("nan", "np.nan").replace("inf", "np.inf")
        return f"np.array({literal}, dtype={value.dtype.numpy_name})"
    return f"_blob({value.b64()!r}, {value.dtype.numpy_name}, {tuple(value.shape)})"


_define("constant", 0, _infer_constant, _emit_constant, "an array literal")


# -- random numbers -------------------------------------------------------------------------


def _infer_random_bits(state: TensorType, *, shape: tuple, part: str) -> TensorType:
    _check(
        state == TensorType((4,), DType.u32),
        f"random_bits: state must be u32[4] (key low, key high, counter low, counter high), "
        f"got {state}",
    )
    _check(part in ("bits", "state"), f"random_bits: part must be 'bits' or 'state', got {part!r}")
    _check(all(d >= 0 for d in shape), f"random_bits: negative dimension in {list(shape)}")
    return TensorType(shape, DType.u32) if part == "bits" else state


_define(
    "random_bits",
    1,
    _infer_random_bits,
    lambda state, shape, part: f"_random_bits({state}, {tuple(shape)}, {part!r})",
    "counter-based random bits: Philox4x32-10 keyed by `state[0:2]` (key low and high words), "
    "one 128-bit block per 4 values counting from the 64-bit counter `state[2] + 2**32 * "
    "state[3]`; `part='bits'` gives u32[`shape`], `part='state'` the u32[4] state after them "
    "(key, counter + blocks used, wrapping at 2**64). All 32-bit words, since Neuron has no "
    "64-bit integer arithmetic. A pure function of `state`, shaped like HLO `rng-bit-generator` "
    "(PHILOX); XLA lays out key and counter words its own way, so an emitter that must "
    "reproduce these bits builds the ten rounds from 32-bit integer ops",
)


# -- collectives ----------------------------------------------------------------------------
#
# ``groups`` are replica groups: a tuple of tuples of global ranks, all of one size, covering the
# ranks 0..n-1 once each (XLA's ``replica_groups``). Each rank takes part in the group that holds
# it; "position" below is a rank's index in its group as listed. The NumPy semantics are
# ``_collective`` in numpy_support: the cpu runtime runs them through torch.distributed.

#: reduction ops of all_reduce and reduce_scatter (torch's ReduceOp SUM, PRODUCT, MAX, MIN)
COLLECTIVE_OPS = ("sum", "prod", "max", "min")


def _group_size(name: str, groups: tuple) -> int:
    """The common size of ``groups``, after checking they are well-formed replica groups."""
    _check(
        isinstance(groups, tuple)
        and len(groups) > 0
        and all(isinstance(g, tuple) and g for g in groups),
        f"{name}: groups must be a non-empty tuple of non-empty tuples of ranks, got {groups!r}",
    )
    size = len(groups[0])
    _check(all(len(g) == size for g in groups), f"{name}: groups {groups} differ in size")
    ranks = sorted(r for g in groups for r in g)
    _check(
        ranks == list(range(len(ranks))),
        f"{name}: groups {groups} must hold ranks 0..{len(ranks) - 1} once each",
    )
    return size


def _check_op(name: str, x: TensorType, op: str) -> None:
    _check(op in COLLECTIVE_OPS, f"{name}: op must be one of {COLLECTIVE_OPS}, got {op!r}")
    _check(
        x.dtype is not DType.bool, f"{name}: needs a numeric operand, got {x}; convert bools first"
    )


def _divided(name: str, x: TensorType, axis: int, size: int) -> None:
    _check(0 <= axis < x.rank, f"{name}: axis {axis} out of range for {x}")
    _check(
        x.shape[axis] % size == 0,
        f"{name}: dimension {axis} of {x} does not divide by the group size {size}",
    )


def _resized(x: TensorType, axis: int, factor: int, divisor: int = 1) -> tuple[int, ...]:
    return tuple(d * factor // divisor if i == axis else d for i, d in enumerate(x.shape))


def _infer_all_reduce(x: TensorType, *, op: str, groups: tuple) -> TensorType:
    _group_size("all_reduce", groups)
    _check_op("all_reduce", x, op)
    return x


def _infer_all_gather(x: TensorType, *, axis: int, groups: tuple) -> TensorType:
    size = _group_size("all_gather", groups)
    _check(0 <= axis < x.rank, f"all_gather: axis {axis} out of range for {x}")
    return TensorType(_resized(x, axis, size), x.dtype)


def _infer_reduce_scatter(x: TensorType, *, op: str, axis: int, groups: tuple) -> TensorType:
    size = _group_size("reduce_scatter", groups)
    _check_op("reduce_scatter", x, op)
    _divided("reduce_scatter", x, axis, size)
    return TensorType(_resized(x, axis, 1, size), x.dtype)


def _infer_all_to_all(
    x: TensorType, *, split_axis: int, concat_axis: int, groups: tuple
) -> TensorType:
    size = _group_size("all_to_all", groups)
    _divided("all_to_all", x, split_axis, size)
    _check(0 <= concat_axis < x.rank, f"all_to_all: concat_axis {concat_axis} out of range for {x}")
    split = TensorType(_resized(x, split_axis, 1, size), x.dtype)
    return TensorType(_resized(split, concat_axis, size), x.dtype)


def _infer_collective_broadcast(x: TensorType, *, source: int, groups: tuple) -> TensorType:
    size = _group_size("collective_broadcast", groups)
    _check(
        0 <= source < size,
        f"collective_broadcast: source {source} is not a position in groups of {size}",
    )
    return x


def _emit_collective(kind: str) -> Emit:
    def emit(x: str, **params: Any) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in sorted(params.items()))
        return f"_collective({kind!r}, {x}{extra})"

    return emit


for _name, _infer, _doc in (
    (
        "all_reduce",
        _infer_all_reduce,
        "every rank gets its group's operands combined by `op` (`sum`, `prod`, `max`, `min`)",
    ),
    (
        "all_gather",
        _infer_all_gather,
        "every rank gets its group's operands concatenated along `axis`, in group order",
    ),
    (
        "reduce_scatter",
        _infer_reduce_scatter,
        "the group's operands combined by `op`, split into group-size blocks along `axis`; the rank at "
        "position i keeps block i",
    ),
    (
        "all_to_all",
        _infer_all_to_all,
        "each operand split into group-size blocks along `split_axis`; the rank at position i gets "
        "block i of every rank, concatenated along `concat_axis` in group order",
    ),
    (
        "collective_broadcast",
        _infer_collective_broadcast,
        "every rank gets the operand of the rank at position `source` of its group",
    ),
):
    _define(
        _name,
        1,
        _infer,
        _emit_collective(_name),
        _doc + "; `groups` are replica groups (tuples of global ranks, of one size, covering "
        "every rank once); the cpu runtime runs it through torch.distributed",
        collective=True,
    )


# -- custom calls ---------------------------------------------------------------------------
#
# A kernel written in another language (an NKI kernel) inside an NKIPy kernel. The IR carries what
# each runtime needs to run it and reads none of it: ``target`` and ``config`` are the HLO
# ``custom_call_target`` and ``backend_config`` a compiler replaces the call with its kernel from
# (``AwsNeuronCustomNativeKernel`` for neuronx-cc), ``host`` names the Python function
# (``module:function``, called ``fn(config, *arrays) -> array``) that computes the same result on
# the host, which the cpu runtime runs. The result type is declared, since nothing here can infer it.


def _infer_custom_call(
    *operands: TensorType, target: str, config: Any, host: str, shape: tuple, dtype: DType
) -> TensorType:
    _check(
        isinstance(target, str) and target != "",
        f"custom_call: target must be a non-empty string, got {target!r}",
    )
    module, _, function = host.partition(":") if isinstance(host, str) else ("", "", "")
    _check(bool(module and function), f"custom_call: host must be 'module:function', got {host!r}")
    _check(all(d >= 0 for d in shape), f"custom_call: negative dimension in {list(shape)}")
    return TensorType(tuple(shape), dtype)


def _emit_custom_call(
    *operands: str, target: str, config: Any, host: str, shape: tuple, dtype: DType
) -> str:
    text = config.text if hasattr(config, "text") else str(config)
    args = "".join(f", {o}" for o in operands)
    return f"_custom_call({host!r}, {text!r}, {tuple(shape)}, {dtype.numpy_name}{args})"


_define(
    "custom_call",
    None,
    _infer_custom_call,
    _emit_custom_call,
    "a kernel from elsewhere (an NKI kernel): `target` and `config` are the HLO custom call a "
    "compiler replaces with it, `host` (`module:function`) computes the same "
    "`fn(config, *operands)` on the host, for the cpu runtime; the result is `dtype[shape]`",
    folds=False,
)


def primitive(name: str) -> Primitive:
    try:
        return PRIMITIVES[name]
    except KeyError:
        raise TypeError(f"unknown NKIPy primitive {name!r}") from None


def infer(name: str, operand_types: Sequence[TensorType], params: dict[str, Any]) -> TensorType:
    """Result type of ``name`` applied to ``operand_types``; ``TypeError`` if ill-typed."""
    prim = primitive(name)
    if prim.arity is not None and len(operand_types) != prim.arity:
        raise TypeError(f"{name} takes {prim.arity} operand(s), got {len(operand_types)}")
    return prim.infer(*operand_types, **params)
