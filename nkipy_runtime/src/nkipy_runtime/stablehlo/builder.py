"""Writing StableHLO text: types, SSA names and the generic op form.

Every op is printed in MLIR's generic form (``%r = "stablehlo.add"(%a, %b) : (...) -> ...``).
It is verbose but uniform, so one ``op`` method serves every emitter, and it is what the
StableHLO parser in jaxlib (and any MLIR tool) accepts without dialect-specific sugar.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import attrs
import numpy as np

from nkipy_core.ir import DType, TensorType

#: IR dtype -> MLIR element type
ELEMENT_TYPES = {
    DType.bool: "i1",
    DType.i8: "i8",
    DType.i16: "i16",
    DType.i32: "i32",
    DType.i64: "i64",
    DType.u8: "ui8",
    DType.u32: "ui32",
    DType.u64: "ui64",
    DType.f16: "f16",
    DType.bf16: "bf16",
    DType.f32: "f32",
    DType.f64: "f64",
}


def tensor_type(t: TensorType) -> str:
    """``tensor<2x3xf32>``; a scalar is ``tensor<f32>``."""
    dims = "".join(f"{d}x" for d in t.shape)
    return f"tensor<{dims}{ELEMENT_TYPES[t.dtype]}>"


def i64_array(values: Sequence[int]) -> str:
    """A dense i64 array attribute (``array<i64: 0, 1>``), as StableHLO writes dimensions."""
    return f"array<i64: {', '.join(str(int(v)) for v in values)}>" if len(values) else "array<i64>"


def dense(array: np.ndarray, dtype: DType) -> str:
    """A ``dense<...>`` literal holding exactly ``array``'s bits (hex of its little-endian bytes;
    booleans as words, since MLIR packs i1 data differently from NumPy)."""
    array = np.asarray(array, dtype=dtype.numpy)
    if array.size == 0:
        return "dense<>"  # MLIR reads it as empty whatever the shape; `[]` would claim shape (0,)
    if dtype is DType.bool:
        if (array == array.flat[0]).all():
            return f"dense<{'true' if array.flat[0] else 'false'}>"
        return f"dense<{_nested(array)}>"
    data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
    return f'dense<"0x{data.hex().upper()}">'


def _is_splat(array: np.ndarray) -> bool:
    """Every element has the same bits (so one element's literal stands for all). Bits, not
    ``==``: ``0.0 == -0.0`` and NaN payloads would otherwise be merged or never match."""
    if array.size == 0:
        return False
    rows = np.ascontiguousarray(array).reshape(array.size, 1).view(np.uint8)
    return bool((rows == rows[0]).all())


def _nested(array: np.ndarray) -> str:
    if array.ndim == 0:
        return "true" if array else "false"
    return "[" + ", ".join(_nested(a) for a in array) + "]"


@attrs.frozen
class Val:
    """An SSA value of the module being written: its name (``%v3``) and its type.

    A value that only re-reads another one says so, for emitters that can read the other one
    directly in a faster form (``dot``): ``widened_from`` a half float it converts exactly to
    f32, ``swapped_from`` a value whose last two axes it swaps."""

    name: str
    type: TensorType
    widened_from: Val | None = attrs.field(default=None, eq=False, repr=False)
    swapped_from: Val | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape


def index_dtype(size: int) -> DType:
    """The type of indices into an axis of ``size`` elements: s32 unless the axis is too long
    for it. neuronx-cc wants s32 indices (trn1 computes 64-bit integers in 32 bits)."""
    return DType.i32 if size <= np.iinfo(np.int32).max else DType.i64


class FunctionBuilder:
    """Accumulates the body of one function (or of one region inside it).

    ``narrow_int64`` says the target computes 64-bit integers in 32 bits (neuronx-cc on trn1),
    so that emitters write the bounds of i64/u64 values as 32-bit ones: a 64-bit bound would be
    cut there, not kept. Off, every 64-bit integer is exact, as on XLA and the cpu runtime.

    ``xla_cpu`` writes convolutions and matrix products in the forms XLA's CPU backend runs
    fastest for their shapes (``convolution.py``, ``reductions._dot``). Off, every ``conv`` is
    one ``stablehlo.convolution`` and every ``dot`` one ``stablehlo.dot_general``: what
    neuronx-cc maps to its tensor engine, laying the data out itself."""

    def __init__(self, *, narrow_int64: bool = False, xla_cpu: bool = False) -> None:
        self.narrow_int64 = narrow_int64
        self.xla_cpu = xla_cpu
        self.lines: list[str] = []
        self._ids = itertools.count()
        self._indent = 2

    def fresh(self, stem: str = "t") -> str:
        return f"%{stem}{next(self._ids)}"

    def op(
        self,
        name: str,
        operands: Sequence[Val],
        result: TensorType | Sequence[TensorType],
        attributes: dict[str, str] | None = None,
        regions: Sequence[list[str]] = (),
    ) -> Val | list[Val]:
        """Append ``name`` (e.g. ``stablehlo.add``) and return its result value(s)."""
        results = [result] if isinstance(result, TensorType) else list(result)
        names = [self.fresh() for _ in results]
        lhs = ", ".join(names)
        attrs_text = ""
        if attributes:
            attrs_text = " {" + ", ".join(f"{k} = {v}" for k, v in attributes.items()) + "}"
        regions_text = ""
        if regions:
            pad = " " * (self._indent * 2)
            regions_text = (
                " ("
                + ", ".join(
                    "{\n" + "\n".join(pad + "  " + line for line in region) + "\n" + pad + "}"
                    for region in regions
                )
                + ")"
            )
        signature = "({}) -> {}".format(
            ", ".join(tensor_type(o.type) for o in operands),
            tensor_type(results[0])
            if len(results) == 1
            else "(" + ", ".join(tensor_type(r) for r in results) + ")",
        )
        args = ", ".join(o.name for o in operands)
        self.lines.append(f'{lhs} = "{name}"({args}){regions_text}{attrs_text} : {signature}')
        vals = [Val(n, t) for n, t in zip(names, results)]
        return vals[0] if isinstance(result, TensorType) else vals

    def constant(
        self, array: np.ndarray | bool | int | float, dtype: DType, shape: Sequence[int] = ()
    ) -> Val:
        """A literal; a Python number is rounded to ``dtype`` the way the IR's constants are."""
        value = np.broadcast_to(
            dtype.scalar(array) if np.ndim(array) == 0 else np.asarray(array), tuple(shape)
        )
        type_ = TensorType(tuple(shape), dtype)
        literal = dense(value.flat[0], dtype) if _is_splat(value) else dense(value, dtype)
        return self.op(
            "stablehlo.constant", [], type_, {"value": f"{literal} : {tensor_type(type_)}"}
        )

    def returns(self, values: Sequence[Val], op: str = "stablehlo.return") -> None:
        types = ", ".join(tensor_type(v.type) for v in values)
        self.lines.append(f'"{op}"({", ".join(v.name for v in values)}) : ({types}) -> ()')

    @contextmanager
    def region(self, *arg_types: TensorType) -> Iterator[tuple[list[str], list[Val]]]:
        """Write a region body (a reduction's combiner, a sort's comparator): ops emitted inside
        the ``with`` go into the yielded line list, whose block takes ``arg_types``."""
        saved, self.lines = self.lines, []
        args = [Val(self.fresh("r"), t) for t in arg_types]
        header = "^bb0({}):".format(", ".join(f"{a.name}: {tensor_type(a.type)}" for a in args))
        body: list[str] = [header]
        self._indent += 1
        try:
            yield body, args
        finally:
            body.extend(self.lines)
            self.lines = saved
            self._indent -= 1

    # -- conveniences every emitter family uses ---------------------------------------------

    def convert(self, x: Val, dtype: DType) -> Val:
        if x.dtype is dtype:
            return x
        result = self.op("stablehlo.convert", [x], TensorType(x.shape, dtype))
        assert isinstance(result, Val)
        if x.dtype.is_half and dtype is DType.f32:
            return attrs.evolve(result, widened_from=x)
        return result

    def broadcast(self, x: Val, shape: Sequence[int], dims: Sequence[int] | None = None) -> Val:
        """``broadcast_in_dim``; ``dims`` default to NumPy's trailing alignment."""
        shape = tuple(shape)
        if x.shape == shape and dims is None:
            return x
        if dims is None:
            dims = range(len(shape) - x.type.rank, len(shape))
        return self.op(
            "stablehlo.broadcast_in_dim",
            [x],
            TensorType(shape, x.dtype),
            {"broadcast_dimensions": i64_array(list(dims))},
        )

    def reshape(self, x: Val, shape: Sequence[int]) -> Val:
        shape = tuple(shape)
        if x.shape == shape:
            return x
        return self.op("stablehlo.reshape", [x], TensorType(shape, x.dtype))

    def iota(self, like: TensorType, axis: int) -> Val:
        """``0, 1, 2, ...`` along ``axis`` of ``like``'s shape, in its dtype."""
        return self.op("stablehlo.iota", [], like, {"iota_dimension": f"{axis} : i64"})

    def full(self, value: bool | int | float, like: TensorType) -> Val:
        """A scalar literal broadcast to ``like``'s shape."""
        return self.broadcast(self.constant(value, like.dtype), like.shape)

    def binary(self, name: str, a: Val, b: Val) -> Val:
        return self.op(f"stablehlo.{name}", [a, b], a.type)

    def unary(self, name: str, x: Val) -> Val:
        return self.op(f"stablehlo.{name}", [x], x.type)

    def compare(self, direction: str, a: Val, b: Val, kind: str | None = None) -> Val:
        """``stablehlo.compare``; ``kind`` defaults from the operand type (FLOAT, SIGNED,
        UNSIGNED; booleans compare as UNSIGNED)."""
        if kind is None:
            kind = (
                "FLOAT"
                if a.dtype.is_float
                else (
                    "SIGNED"
                    if a.dtype in (DType.i8, DType.i16, DType.i32, DType.i64)
                    else "UNSIGNED"
                )
            )
        return self.op(
            "stablehlo.compare",
            [a, b],
            TensorType(a.shape, DType.bool),
            {
                "comparison_direction": f"#stablehlo<comparison_direction {direction}>",
                "compare_type": f"#stablehlo<comparison_type {kind}>",
            },
        )

    def select(self, pred: Val, a: Val, b: Val) -> Val:
        return self.op("stablehlo.select", [pred, a, b], a.type)
