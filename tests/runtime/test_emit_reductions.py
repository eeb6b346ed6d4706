"""The StableHLO emitters of dot, reduce, argreduce, cumulative and sort agree with the NumPy
reference (the cpu runtime), run through XLA on this machine's CPU.

Two kinds of data. *Special* values (NaN, ±inf, ±0.0, repeated values, integer bounds that
wrap) drive everything whose result is a selection or an order: max/min, any/all, argmax,
cummax, sort. They compare exactly. *Smooth* positive floats drive sums and products, whose
rounding depends on the order of the additions, which XLA is free to choose: with positive
terms there is no cancellation, so the difference stays within a few ulps per term
(``_rtol``). Integer sums and products use the special values and compare exactly (wrapping).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xla_oracle import assert_same, assert_same_bits, run_on_xla, run_reference

from nkipy_core.ir import DType, KernelBuilder, TensorType

pytest.importorskip("jax", reason="the xla oracle needs the nkipy-runtime[xla] extra (jax, jaxlib)")

DTYPES = [DType.f32, DType.f16, DType.bf16, DType.f64, DType.i32, DType.i64, DType.u8, DType.bool]
NUMERIC = [d for d in DTYPES if d is not DType.bool]


def _kernel(prim: str, types: list[TensorType], **params):
    return _cases_kernel(prim, [(types, params)])


def _cases_kernel(prim: str, cases: list[tuple[list[TensorType], dict]]):
    """One kernel holding every case (its own parameters and output), so that a test compiles
    once: XLA compilation, not execution, is what these tests spend their time on."""
    kb = KernelBuilder(prim)
    outputs = [kb.emit(prim, [kb.param(t) for t in types], params) for types, params in cases]
    return kb.finish(outputs)


def _check_one_operand(
    prim: str, dtype: DType, cases: list[tuple[tuple[int, ...], dict]], data, rtol: float = 0.0
):
    """Every ``(shape, params)`` case of a one-operand primitive on ``data(shape, dtype, seed)``."""
    kernel = _cases_kernel(prim, [([TensorType(shape, dtype)], params) for shape, params in cases])
    assert_same(kernel, [data(shape, dtype, i) for i, (shape, _) in enumerate(cases)], rtol=rtol)


def _special(shape: tuple[int, ...], dtype: DType, seed: int = 0) -> np.ndarray:
    """Values drawn from a small pool, so ties are common, holding each dtype's hard cases."""
    rng = np.random.default_rng(seed)
    if dtype is DType.bool:
        return rng.random(shape) < 0.5
    if dtype.is_float:
        pool = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 1.5, -2.0, 3.0, 3.0, -1.25, 0.5, 7.0])
    else:
        info = np.iinfo(dtype.numpy)
        pool = np.array([info.min, info.max, 0, 1, -1, 5, 5, -7, 100], dtype=np.int64)
    return pool[rng.integers(0, len(pool), shape)].astype(dtype.numpy)


def _smooth(shape: tuple[int, ...], dtype: DType, seed: int = 0) -> np.ndarray:
    """Positive floats for sums and products (no cancellation); integers as ``_special``."""
    if not dtype.is_float:
        return _special(shape, dtype, seed)
    return np.random.default_rng(seed).uniform(0.5, 2.0, shape).astype(dtype.numpy)


def _rtol(dtype: DType) -> float:
    """An order-dependent float sum of at most ~30 positive terms: 32 ulps of the computing type
    (f32 for half floats, which then round once, so one ulp of the half type on top)."""
    if not dtype.is_float:
        return 0.0
    if dtype.is_half:
        return float(ml_dtypes.finfo(dtype.numpy).eps)
    return 32 * float(np.finfo(dtype.numpy).eps)


# -- dot -------------------------------------------------------------------------------------

DOT_SHAPES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 2)),  # one batch dimension
    ((2, 1, 3, 2), (2, 1, 2, 3)),  # two batch dimensions
    ((3, 0), (0, 2)),  # empty contraction: zeros
    ((0, 2), (2, 3)),  # empty result
]


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
def test_dot(dtype):
    kernel = _cases_kernel(
        "dot", [([TensorType(sa, dtype), TensorType(sb, dtype)], {}) for sa, sb in DOT_SHAPES]
    )
    inputs = [_smooth(s, dtype, i) for i, pair in enumerate(DOT_SHAPES) for s in pair]
    assert_same(kernel, inputs, rtol=_rtol(dtype))


def _dot_lines(kernel) -> list[str]:
    from nkipy_runtime.stablehlo import emit_module

    return [line.strip() for line in emit_module(kernel).splitlines() if "dot_general" in line]


@pytest.mark.parametrize("dtype", [DType.bf16, DType.f16], ids=str)
def test_a_half_float_dot_multiplies_the_half_floats_and_sums_in_f32(dtype):
    """XLA's CPU backend runs a bf16 dot with an f32 result on its bf16 instructions, twice as
    fast as an f32 dot of the widened operands. The dot of a half-float kernel and the f32 dot of
    widened half floats (what a bf16 linear layer lowers to) both multiply the half floats; the
    products are exact in f32, so the sums, of 512 terms here, match the reference's."""
    a, b = _smooth((8, 512), dtype), _smooth((512, 16), dtype, seed=1)
    kb = KernelBuilder("dot")
    x, y = kb.param(TensorType(a.shape, dtype)), kb.param(TensorType(b.shape, dtype))
    wide = [kb.emit("convert", [v], {"dtype": DType.f32}) for v in (x, y)]
    kernel = kb.finish([kb.emit("dot", [x, y], {}), kb.emit("dot", wide, {})])
    half = "bf16" if dtype is DType.bf16 else "f16"
    dots = _dot_lines(kernel)
    assert len(dots) == 2, dots
    for line in dots:
        assert line.endswith(f"(tensor<8x512x{half}>, tensor<512x16x{half}>) -> tensor<8x16xf32>")
    assert_same(kernel, [a, b], rtol=_rtol(dtype))


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16], ids=str)
def test_a_dot_contracts_a_swapped_operand_where_it_lies(dtype):
    """A transposed weight (``x @ w.T``, a linear layer) is contracted along the weight's own
    last axis rather than transposed first: XLA's CPU backend upcasts a bf16 dot that reads a
    transpose. Both operands swapped, with a batch dimension, widened or not."""
    a, a_t, w = (
        _smooth((2, 4, 6), dtype),
        _smooth((2, 6, 4), dtype, 1),
        _smooth((2, 5, 6), dtype, 2),
    )
    kb = KernelBuilder("dot")
    x, x_t, y = (kb.param(TensorType(v.shape, dtype)) for v in (a, a_t, w))
    swap = {"perm": (0, 2, 1)}
    y_t = kb.emit("transpose", [y], swap)
    wide = [kb.emit("convert", [v], {"dtype": DType.f32}) for v in (x, y_t)]
    kernel = kb.finish(
        [
            kb.emit("dot", [x, y_t], {}),
            kb.emit("dot", wide, {}),
            kb.emit("dot", [kb.emit("transpose", [x_t], swap), y_t], {}),
        ]
    )
    dots = _dot_lines(kernel)
    assert len(dots) == 3, dots
    for line, lhs in zip(dots, (2, 2, 1)):  # the third's lhs is swapped too
        assert f"lhs_contracting_dimensions = [{lhs}], rhs_contracting_dimensions = [2]" in line
    assert_same(kernel, [a, a_t, w], rtol=_rtol(dtype))


def test_xla_cpu_writes_a_transposed_left_operand_out_and_a_skinny_product_transposed():
    """For XLA's CPU backend: the left operand of a weight gradient (``dy.T @ x``) is written out
    behind a barrier instead of contracted along its rows, and a linear layer on at most 64 rows
    with a weight of at least 65536 elements is computed as ``(w @ x.T).T``; a product of more
    rows or with a smaller weight keeps its form. neuronx-cc's module keeps every dot as one
    ``dot_general`` reading through the transposes."""
    from nkipy_runtime.stablehlo import emit_module

    f32 = DType.f32
    values = [
        _smooth((8, 256), f32),  # x, skinny
        _smooth((512, 256), f32, 1),  # w
        _smooth((128, 256), f32, 2),  # x, too many rows
        _smooth((64, 64), f32, 3),  # a small weight
        _smooth((8, 512), f32, 4),  # dy
    ]
    kb = KernelBuilder("dot")
    x, w, tall, small, dy = (kb.param(TensorType(v.shape, f32)) for v in values)
    swap = {"perm": (1, 0)}
    w_t = kb.emit("transpose", [w], swap)
    kernel = kb.finish(
        [
            kb.emit("dot", [x, w_t], {}),
            kb.emit("dot", [tall, w_t], {}),
            kb.emit(
                "dot",
                [kb.emit("slice", [x], _columns(64)), kb.emit("transpose", [small], swap)],
                {},
            ),
            kb.emit("dot", [kb.emit("transpose", [dy], swap), x], {}),
        ]
    )
    host = emit_module(kernel, xla_cpu=True)
    dots = [line.strip() for line in host.splitlines() if "dot_general" in line]
    assert dots[0].endswith("(tensor<512x256xf32>, tensor<8x256xf32>) -> tensor<512x8xf32>")
    assert "lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]" in dots[0]
    assert dots[1].endswith("(tensor<128x256xf32>, tensor<512x256xf32>) -> tensor<128x512xf32>")
    assert dots[2].endswith("(tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>")
    assert dots[3].endswith("(tensor<512x8xf32>, tensor<8x256xf32>) -> tensor<512x256xf32>")
    assert "lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]" in dots[3]
    assert host.count("stablehlo.optimization_barrier") == 2
    neuron = emit_module(kernel)
    assert "optimization_barrier" not in neuron
    assert "lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]" in neuron
    assert_same(kernel, values, rtol=1e-5)


def _columns(n: int) -> dict:
    return {"start": (0, 0), "limit": (8, n), "stride": (1, 1)}


def test_dot_with_nan_and_inf():
    """inf * 0 and inf - inf make NaN whatever the order; the finite pool values sum exactly."""
    a, b = _special((4, 3), DType.f32), _special((3, 4), DType.f32, seed=1)
    kernel = _kernel("dot", [TensorType(a.shape, DType.f32), TensorType(b.shape, DType.f32)])
    assert np.isnan(run_reference(kernel, [a, b])[0]).any()  # the data reaches the NaN cases
    assert_same(kernel, [a, b])


# -- reduce ----------------------------------------------------------------------------------

REDUCE_CASES = [
    ((2, 3, 4), (1,), False),
    ((2, 3, 4), (0, 2), True),
    ((2, 3, 4), (0, 1, 2), False),
    ((2, 3, 4), (), True),  # no axes: the identity (any/all still turn values into truth)
    ((), (), False),  # 0-d
    ((3, 0, 2), (1,), True),  # empty axis: the identity (max/min refuse it)
    ((3, 0, 2), (0,), False),  # empty result
]


def _reduce_cases(kinds: tuple[str, ...]) -> list[tuple[tuple[int, ...], dict]]:
    return [
        (shape, {"kind": kind, "axes": axes, "keepdims": keepdims})
        for kind in kinds
        for shape, axes, keepdims in REDUCE_CASES
        # an empty axis is ill-typed for max/min: NumPy's max has no identity
        if kind not in ("max", "min") or all(shape[a] for a in axes)
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reduce_sum_prod(dtype):
    _check_one_operand("reduce", dtype, _reduce_cases(("sum", "prod")), _smooth, _rtol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reduce_max_min_any_all(dtype):
    _check_one_operand("reduce", dtype, _reduce_cases(("max", "min", "any", "all")), _special)


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16], ids=str)
def test_reduce_max_min_propagate_nan(dtype):
    x = np.array(
        [[1.0, np.nan, 3.0], [-0.0, 0.0, -np.inf], [np.nan, np.nan, np.nan], [2.0, 2.0, np.inf]],
        dtype=dtype.numpy,
    )
    cases = [
        ([TensorType(x.shape, dtype)], {"kind": kind, "axes": (1,), "keepdims": False})
        for kind in ("max", "min")
    ]
    assert_same(_cases_kernel("reduce", cases), [x, x])


# -- argreduce -------------------------------------------------------------------------------

ARG_CASES = [
    ((3, 7), 1, False),
    ((7, 3), 0, True),
    ((9,), 0, False),
    ((2, 5, 3), 1, True),
    ((1,), 0, True),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_argreduce(dtype):
    cases = [
        (shape, {"kind": kind, "axis": axis, "keepdims": keepdims})
        for kind in ("argmax", "argmin")
        for shape, axis, keepdims in ARG_CASES
    ]
    _check_one_operand("argreduce", dtype, cases, _special)


@pytest.mark.parametrize("dtype", [DType.f32, DType.f16, DType.bf16], ids=str)
def test_argreduce_first_nan_and_first_tie(dtype):
    """NaN wins over infinities and is reported at its first position, whatever its sign bit,
    in an all-NaN row too; equal values (-0.0 and 0.0 among them) report the first; the
    extreme at the last position is found."""
    x = np.array(
        [
            [np.inf, 1.0, np.nan, 2.0, np.nan],
            [-np.inf, 5.0, -0.0, 5.0, -np.inf],
            [0.0, -0.0, 0.0, -0.0, 0.0],
            [1.0, 1.0, 1.0, 1.0, 9.0],
            [-9.0, 1.0, 1.0, 1.0, -9.0],
            [np.nan, np.nan, np.nan, np.nan, np.nan],
            [-np.inf, 3.0, -np.nan, np.inf, np.nan],
        ],
        dtype=dtype.numpy,
    )
    assert np.signbit(x[6, 2])  # a NaN with its sign bit set
    cases = [
        ([TensorType(x.shape, dtype)], {"kind": kind, "axis": 1, "keepdims": False})
        for kind in ("argmax", "argmin")
    ]
    assert_same(_cases_kernel("argreduce", cases), [x, x])


# -- cumulative ------------------------------------------------------------------------------

SCAN_CASES = [
    ((3, 7), 1),
    ((7, 3), 0),
    ((9,), 0),
    ((2, 4, 3), 1),
    ((1,), 0),
    ((2, 0, 3), 1),
    ((2, 3, 0), 0),
]


def _scan_cases(kinds: tuple[str, ...]) -> list[tuple[tuple[int, ...], dict]]:
    return [(shape, {"kind": kind, "axis": axis}) for kind in kinds for shape, axis in SCAN_CASES]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cumsum_cumprod(dtype):
    _check_one_operand(
        "cumulative", dtype, _scan_cases(("cumsum", "cumprod")), _smooth, _rtol(dtype)
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cummax_cummin(dtype):
    _check_one_operand("cumulative", dtype, _scan_cases(("cummax", "cummin")), _special)


def test_cumulative_nan_stays():
    x = np.array(
        [[1.0, np.nan, 3.0, -np.inf], [-np.inf, 2.0, np.inf, np.nan], [-0.0, 0.0, -1.0, 4.0]],
        np.float32,
    )
    cases = [
        ([TensorType(x.shape, DType.f32)], {"kind": kind, "axis": 1})
        for kind in ("cumsum", "cummax", "cummin")
    ]
    assert_same(_cases_kernel("cumulative", cases), [x, x, x])


# -- sort ------------------------------------------------------------------------------------

SORT_CASES = [((3, 8), 1), ((8, 3), 0), ((11,), 0), ((2, 5, 3), 1), ((0, 4), 1), ((4, 0), 1)]


def _sort_data(shape: tuple[int, ...], dtype: DType, seed: int) -> np.ndarray:
    x = _special(shape, dtype, seed)
    if dtype is DType.bf16:
        # ml_dtypes compares NaN equal to everything, so NumPy's bf16 sort order around a NaN
        # depends on its merge sort's steps, not on the values; no compiled sort can match that
        x[np.isnan(x)] = 1.5
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sort(dtype):
    # NumPy rejects -x on booleans, so the reference has no descending bool sort:
    # test_sort_bool_descending checks that case against NumPy's sort of ~x instead
    directions = (False,) if dtype is DType.bool else (False, True)
    cases = [
        (shape, {"axis": axis, "descending": descending, "indices": indices})
        for descending in directions
        for indices in (False, True)
        for shape, axis in SORT_CASES
    ]
    _check_one_operand("sort", dtype, cases, _sort_data)


def _nans(dtype: DType, n: int) -> np.ndarray:
    """``n`` quiet NaNs of ``dtype`` with distinct payloads, every other one negative."""
    bits = np.dtype(f"u{dtype.numpy.itemsize}")
    nans = np.full(n, np.nan, dtype.numpy).view(bits)
    nans |= np.arange(n).astype(bits)
    nans[1::2] |= bits.type(1) << bits.type(8 * bits.itemsize - 1)
    return nans.view(dtype.numpy)


@pytest.mark.parametrize("dtype", [DType.f32, DType.f16, DType.bf16, DType.f64], ids=str)
def test_sort_keeps_the_bits_and_order_of_zeros_and_nans(dtype):
    """Values come out with their bits: ``-0.0`` and ``0.0`` tie and keep their input order,
    NaNs (payloads, sign bits) go last in input order, ascending and descending alike."""
    row = np.array(
        [-0.0, 0.0, 1.5, -0.0, -np.inf, 0.0, 1.5, np.inf, -2.0, -0.0, -2.0, 0.0], dtype.numpy
    )
    if dtype is not DType.bf16:  # see _sort_data: NumPy's bf16 order around NaN is arbitrary
        row = np.concatenate([row, _nans(dtype, 4)])
        row[[2, 5, 9, 12, 13, 14, 15]] = row[[12, 13, 14, 2, 5, 9, 15]]  # NaNs among the rest
    x = np.stack([row, row[::-1]])
    cases = [
        ([TensorType(x.shape, dtype)], {"axis": 1, "descending": d, "indices": i})
        for d in (False, True)
        for i in (False, True)
    ]
    assert_same_bits(_cases_kernel("sort", cases), [x] * len(cases))


@pytest.mark.parametrize("indices", [False, True], ids=["values", "indices"])
def test_sort_bool_descending(indices):
    """True first, ties in input order: the stable argsort of ``~x``."""
    x = _special((4, 9), DType.bool)
    order = np.argsort(~x, axis=1, kind="stable")
    want = order if indices else np.take_along_axis(x, order, axis=1)
    (got,) = run_on_xla(
        _kernel(
            "sort", [TensorType(x.shape, DType.bool)], axis=1, descending=True, indices=indices
        ),
        [x],
    )
    np.testing.assert_array_equal(got, want)
