"""The emitted StableHLO keeps to the forms neuronx-cc documents that it accepts: reduces (and
scans) with one result, an add/multiply/maximum/minimum combiner and a constant init; sort
comparators that are one ``compare`` LT of integer keys; no ``or``/``and`` in any combiner;
s32 gather and scatter indices; and, with ``narrow_int64`` (trn1 computes 64-bit integers in
32 bits), no 64-bit integer constant outside the 32-bit range.

These read the module text only; that the same modules compute NumPy's results is what
test_emit_reductions and test_emit_indexing check on XLA (every runtime emits one form).
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

import numpy as np
import pytest

from nkipy_core.ir import DType, KernelBuilder, TensorType
from nkipy_runtime.stablehlo import emit_module

DTYPES = [DType.f32, DType.f16, DType.bf16, DType.f64, DType.i32, DType.i64, DType.u8, DType.bool]
INDEX_DTYPES = [DType.i8, DType.i16, DType.i32, DType.i64, DType.u8, DType.u32, DType.u64]
COMBINERS = {"stablehlo.add", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.minimum"}


class _Op(NamedTuple):
    results: int
    operands: list[str]
    operand_types: list[str]
    region: list[str]  # the op's region lines (its combiner or comparator)

    def region_ops(self) -> list[str]:
        return [name for line in self.region for name in re.findall(r'"(\w+\.\w+)"', line)]


def _ops(text: str, name: str) -> list[_Op]:
    """Every ``name`` op of a module as the emitter prints it (generic form, region lines between
    the op's line ending in ``({`` and the line starting with ``})``)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if f'"{name}"(' not in line:
            continue
        if line.endswith("({"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("})"))
            region, last = lines[i + 1 : end], lines[end]
        else:
            region, last = [], line
        lhs, rhs = line.split(" = ", 1)
        operands = re.match(r'"[\w.]+"\(([^)]*)\)', rhs).group(1).split(", ")
        signature = re.sub(r" loc\(.*\)$", "", last).rsplit(" : (", 1)[1]
        types = signature.split(") -> ")[0].split(", ")
        found.append(_Op(len(lhs.split(", ")), operands, types, region))
    return found


def _constants(text: str) -> set[str]:
    return set(re.findall(r'(%\w+) = "stablehlo.constant"', text))


def _module(prim: str, cases: list[tuple[list[TensorType], dict]], **options) -> str:
    kb = KernelBuilder(prim)
    outputs = [kb.emit(prim, [kb.param(t) for t in types], params) for types, params in cases]
    return emit_module(kb.finish(outputs), **options)


def _assert_reduces_neuron_form(text: str) -> None:
    """Every reduce and reduce_window: one result, one combiner from the documented four, a
    constant init, and at least one of them in the module."""
    reduces = _ops(text, "stablehlo.reduce") + _ops(text, "stablehlo.reduce_window")
    assert reduces
    constants = _constants(text)
    for op in reduces:
        assert op.results == 1, op
        ops = op.region_ops()
        assert len(ops) == 2 and ops[0] in COMBINERS and ops[1] == "stablehlo.return", op
        assert op.operands[1] in constants, op


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_argreduce_is_two_single_result_reduces(dtype):
    cases = [
        ([TensorType((3, 5), dtype)], {"kind": kind, "axis": axis, "keepdims": keepdims})
        for kind in ("argmax", "argmin")
        for axis, keepdims in ((0, False), (1, True))
    ]
    text = _module("argreduce", cases)
    _assert_reduces_neuron_form(text)
    reduces = _ops(text, "stablehlo.reduce")
    assert len(reduces) == 2 * len(cases)
    # the second of each pair: the min of s32 indices
    assert all(op.operand_types[0].endswith("xi32>") for op in reduces[1::2])
    assert all(op.region_ops()[0] == "stablehlo.minimum" for op in reduces[1::2])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reductions_and_scans_combine_without_or_and(dtype):
    """Boolean ones (and any/all of numbers) included: they run on u8 with maximum/minimum."""
    reduce_kinds = ("sum", "prod", "max", "min", "any", "all")
    reduce_cases = [
        ([TensorType((2, 3, 4), dtype)], {"kind": kind, "axes": axes, "keepdims": False})
        for kind in reduce_kinds
        for axes in ((1,), (0, 2))
    ]
    _assert_reduces_neuron_form(_module("reduce", reduce_cases))
    scan_cases = [
        ([TensorType((3, 4), dtype)], {"kind": kind, "axis": 1})
        for kind in ("cumsum", "cumprod", "cummax", "cummin")
    ]
    _assert_reduces_neuron_form(_module("cumulative", scan_cases))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scatter_combiners_hold_no_or_and(dtype):
    x, idx = TensorType((4, 3), dtype), TensorType((2,), DType.i64)
    upd = TensorType((2, 3), dtype)
    text = _module("scatter_add", [([x, idx, upd], {"axis": 0})])
    text += _module(
        "scatter_reduce",
        [([x, idx, upd], {"axis": 0, "kind": kind}) for kind in ("max", "min", "prod")],
    )
    scatters = _ops(text, "stablehlo.scatter")
    assert len(scatters) == 4
    for op in scatters:
        ops = set(op.region_ops())
        assert not ops & {"stablehlo.or", "stablehlo.and"}, op


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sort_comparator_is_one_integer_compare_lt(dtype):
    cases = [
        ([TensorType((3, 5), dtype)], {"axis": 1, "descending": d, "indices": i})
        for d in (False, True)
        for i in (False, True)
    ]
    sorts = _ops(_module("sort", cases), "stablehlo.sort")
    assert len(sorts) == len(cases)
    for op in sorts:
        assert op.region_ops() == ["stablehlo.compare", "stablehlo.return"], op
        (compare,) = [line for line in op.region if "stablehlo.compare" in line]
        assert "comparison_direction LT>" in compare, compare
        assert re.search(r"comparison_type (SIGNED|UNSIGNED)>", compare), compare


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
def test_gather_and_scatter_indices_are_s32(index_dtype):
    x = TensorType((4, 5), DType.f32)
    text = _module("take", [([x, TensorType((2, 3), index_dtype)], {"axis": 1})])
    text += _module("take_along_axis", [([x, TensorType((4, 2), index_dtype)], {"axis": 1})])
    text += _module(
        "scatter_add",
        [([x, TensorType((3,), index_dtype), TensorType((3, 5), DType.f32)], {"axis": 0})],
    )
    ops = _ops(text, "stablehlo.gather") + _ops(text, "stablehlo.scatter")
    assert len(ops) == 3
    for op in ops:
        assert op.operand_types[1].endswith("xi32>"), op


# -- narrow_int64 ----------------------------------------------------------------------------

_INT64 = {"i64": np.iinfo(np.int32), "ui64": np.iinfo(np.uint32)}


def _wide_constants(text: str) -> list[int]:
    """64-bit integer constants of ``text`` outside the 32-bit range of their signedness."""
    wide = []
    pattern = r'value = dense<"0x([0-9A-F]+)"> : tensor<(?:\d+x)*(i64|ui64)>'
    for data, type_ in re.findall(pattern, text):
        values = np.frombuffer(bytes.fromhex(data), "<i8" if type_ == "i64" else "<u8")
        info = _INT64[type_]
        wide += [int(v) for v in values if not info.min <= int(v) <= info.max]
    return wide


def _int64_kernel():
    kb = KernelBuilder("int64_bounds")
    outputs = []
    for dtype in (DType.i64, DType.u64):
        for kind in ("max", "min"):
            x = kb.param(TensorType((3, 5), dtype))
            outputs.append(kb.emit("reduce", [x], {"kind": kind, "axes": (1,), "keepdims": False}))
        for kind in ("cummax", "cummin"):
            outputs.append(
                kb.emit(
                    "cumulative", [kb.param(TensorType((3, 5), dtype))], {"kind": kind, "axis": 1}
                )
            )
    for kind in ("argmax", "argmin"):
        x = kb.param(TensorType((3, 5), DType.i64))
        outputs.append(kb.emit("argreduce", [x], {"kind": kind, "axis": 1, "keepdims": False}))
    return kb.finish(outputs)


def test_narrow_int64_writes_no_constant_beyond_32_bits():
    kernel = _int64_kernel()
    assert _wide_constants(emit_module(kernel))  # the exact 64-bit identities, by default
    assert _wide_constants(emit_module(kernel, narrow_int64=True)) == []


def test_narrow_int64_module_still_matches_numpy_within_32_bits(monkeypatch):
    """On XLA (which computes in 64 bits) the 32-bit identities give NumPy's results for values
    that fit 32 bits, the values a trn1 kernel holds."""
    pytest.importorskip("jax", reason="the xla oracle needs the nkipy-runtime[xla] extra")
    from xla_oracle import assert_same

    from nkipy_runtime import hlo_files, xla_runtime

    monkeypatch.setattr(
        xla_runtime, "hlo_artifacts", functools.partial(hlo_files.hlo_artifacts, narrow_int64=True)
    )
    kernel = _int64_kernel()
    rng = np.random.default_rng(0)
    inputs = []
    for t in kernel.input_types:
        info = np.iinfo(np.int32 if t.dtype is DType.i64 else np.uint32)
        pool = np.array([info.min, info.max, 0, 1, 5, 5, info.max // 3], dtype=np.int64)
        inputs.append(pool[rng.integers(0, len(pool), t.shape)].astype(t.dtype.numpy))
    assert_same(kernel, inputs)
