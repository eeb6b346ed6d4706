"""Each primitive's torch rule (``nkipy_runtime.fx.rules``) against the NumPy reference, over the
element types its type rule accepts: the kernel's FX graph (``fx.graph.trace``) run as it is,
without TorchInductor, against the cpu runtime.

Exact unless a primitive is transcendental (torch's and the C library's approximations may
differ in the last bits); NaN where the reference has NaN.
"""

import numpy as np
import pytest
import torch
from op_kernels import ALL_DTYPES, accepts, one_op, sample

from nkipy_core import _torch
from nkipy_core.ir import (
    ConstantData,
    DType,
    KernelBuilder,
    TensorType,
    numpy_to_torch,
    torch_to_numpy,
)
from nkipy_core.runtime import CpuRuntime
from nkipy_runtime.fx import graph, rules

TRANSCENDENTAL = {
    "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "atan",
    "logistic", "erf", "erfc", "pow", "atan2",
}  # fmt: skip
HALF_ULP = {DType.f16: 2**-10, DType.bf16: 2**-7}
UNARY = [
    "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "atan",
    "logistic", "erf", "erfc", "floor", "ceil", "round", "isnan", "isinf", "signbit", "neg",
    "abs", "sign", "not", "bitwise_not",
]  # fmt: skip
BINARY = [
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "remainder", "fmod",
    "floor_divide", "atan2", "and", "or", "xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    "eq", "ne", "lt", "le", "gt", "ge",
]  # fmt: skip
TORCH_DTYPES = [d for d in ALL_DTYPES if d in rules.DTYPES]


def run_rules(kernel, inputs):
    gm = graph.trace(kernel)
    outs = gm(*[numpy_to_torch(np.array(a, copy=True)) for a in inputs])
    return [torch_to_numpy(o.contiguous()) for o in outs]


def reference(kernel, inputs):
    runtime = CpuRuntime()
    return runtime.run_host(runtime.compile(kernel, None), [np.array(a, copy=True) for a in inputs])


def assert_matches(kernel, inputs, rtol=0.0):
    assert rules.unsupported(kernel) is None
    got, want = run_rules(kernel, inputs), reference(kernel, inputs)
    for g, w, t in zip(got, want, kernel.output_types, strict=True):
        w = np.asarray(w, dtype=t.dtype.numpy)
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        if t.dtype.is_float:
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            np.testing.assert_array_equal(np.isnan(g64), np.isnan(w64))
            tol = max(rtol, HALF_ULP.get(t.dtype, 0.0) if rtol else 0.0)
            np.testing.assert_allclose(g64, w64, rtol=tol, atol=0 if not tol else 1e-30)
        else:
            np.testing.assert_array_equal(g, w)


def sweep(prim, arity):
    """One kernel applying ``prim`` to samples of every accepted element type."""
    kb = KernelBuilder(f"sweep_{prim}")
    outs, flat = [], []
    with kb.building(f"test.{prim}"):
        for dtype in TORCH_DTYPES:
            if not accepts(prim, arity, dtype):
                continue
            arrays = [sample(dtype, (4, 8), seed) for seed in range(arity)]
            if prim in ("remainder", "fmod", "floor_divide") and dtype.is_integer:
                arrays[1] = np.where(arrays[1] == 0, 1, arrays[1]).astype(arrays[1].dtype)
            if prim == "pow" and dtype.is_integer:
                arrays[1] = np.abs(arrays[1]) % 4
            args = [kb.param(TensorType(a.shape, DType.from_numpy(a.dtype))) for a in arrays]
            outs.append(kb.emit(prim, args, {}))
            flat += arrays
    return kb.finish(outs), flat


@pytest.mark.parametrize("prim", UNARY)
def test_unary(prim):
    kernel, inputs = sweep(prim, 1)
    assert_matches(kernel, inputs, rtol=2e-6 if prim in TRANSCENDENTAL else 0.0)


@pytest.mark.parametrize("prim", BINARY)
def test_binary(prim):
    kernel, inputs = sweep(prim, 2)
    assert_matches(kernel, inputs, rtol=2e-6 if prim in TRANSCENDENTAL else 0.0)


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_select_and_convert_to_every_type(dtype):
    kb = KernelBuilder("convert")
    x = sample(dtype, (4, 8))
    cond, other = sample(DType.bool, (4, 8), 1), sample(dtype, (4, 8), 2)
    with kb.building("test.convert"):
        px, pc, po = (
            kb.param(TensorType((4, 8), DType.from_numpy(a.dtype))) for a in (x, cond, other)
        )
        outs = [kb.emit("convert", [px], {"dtype": to}) for to in TORCH_DTYPES]
        outs.append(kb.emit("select", [pc, px, po], {}))
    inputs = [x, cond, other]
    if dtype.is_float:  # float to int of NaN, infinities or out of range values is undefined
        inputs[0] = np.nan_to_num(x, nan=1.5, posinf=100.0, neginf=-100.0)
    assert_matches(kb.finish(outs), inputs)


SHAPES = [
    ("broadcast", [(3, 1)], {"shape": (2, 3, 4)}),
    ("broadcast", [()], {"shape": (2, 3)}),
    ("reshape", [(2, 3, 4)], {"shape": (4, 6)}),
    ("transpose", [(2, 3, 4)], {"perm": (2, 0, 1)}),
    ("reverse", [(2, 3, 4)], {"axes": (0, 2)}),
    ("slice", [(5, 6)], {"start": (1, 0), "limit": (5, 6), "stride": (2, 4)}),
    ("concatenate", [(2, 3), (2, 0), (2, 1)], {"axis": 1}),
    ("pad", [(2, 3), ()], {"low": (1, 0), "high": (0, 2)}),
    ("reduce", [(3, 4, 5)], {"kind": "sum", "axes": (0, 2), "keepdims": False}),
    ("reduce", [(3, 4, 5)], {"kind": "prod", "axes": (1, 2), "keepdims": True}),
    ("reduce", [(3, 4, 5)], {"kind": "max", "axes": (1,), "keepdims": False}),
    ("reduce", [(3, 4, 5)], {"kind": "min", "axes": (0, 1, 2), "keepdims": False}),
    ("argreduce", [(3, 8)], {"kind": "argmax", "axis": 1, "keepdims": False}),
    ("argreduce", [(3, 8)], {"kind": "argmin", "axis": 0, "keepdims": True}),
    ("cumulative", [(3, 8)], {"kind": "cumsum", "axis": 1}),
    ("cumulative", [(3, 8)], {"kind": "cumprod", "axis": 0}),
    ("cumulative", [(3, 8)], {"kind": "cummax", "axis": 1}),
    ("cumulative", [(3, 8)], {"kind": "cummin", "axis": 1}),
    ("sort", [(3, 8)], {"axis": 1, "descending": False, "indices": False}),
    ("sort", [(3, 8)], {"axis": 1, "descending": True, "indices": True}),
]


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.i32, DType.i64], ids=str)
@pytest.mark.parametrize(("prim", "shapes", "params"), SHAPES, ids=str)
def test_shape_reduction_and_scan(prim, shapes, params, dtype):
    inputs = [sample(dtype, s, seed) for seed, s in enumerate(shapes)]
    if prim == "sort" and dtype is DType.bf16:
        # the reference sorts bf16 through ml_dtypes, which orders NaN first (torch: last)
        inputs = [np.nan_to_num(a.astype(np.float32)).astype(a.dtype) for a in inputs]
    if prim == "reduce" and params["kind"] in ("sum", "prod") and dtype.is_float:
        rtol = HALF_ULP.get(dtype, 1e-6) * 4  # torch and NumPy sum in different orders
    elif prim == "cumulative" and params["kind"] in ("cumsum", "cumprod") and dtype.is_float:
        rtol = HALF_ULP.get(dtype, 1e-6) * 4
    else:
        rtol = 0.0
    assert_matches(one_op(prim, inputs, **params), inputs, rtol=rtol)


@pytest.mark.parametrize("kind", ["any", "all"])
def test_logical_reductions(kind):
    inputs = [sample(DType.bool, (3, 4, 5))]
    assert_matches(one_op("reduce", inputs, kind=kind, axes=(1,), keepdims=False), inputs)


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.i64], ids=str)
def test_gathers_and_scatters(dtype):
    x = sample(dtype, (5, 6))
    idx = np.array([[4, 0, 2], [1, 1, 3]], dtype=np.int64)
    assert_matches(one_op("take", [x, idx], axis=0), [x, idx])
    along = np.array([[5, 0], [1, 1], [2, 3], [0, 0], [4, 5]], dtype=np.int32)
    assert_matches(one_op("take_along_axis", [x, along], axis=1), [x, along])
    rows, upd = np.array([3, 0, 3], dtype=np.int64), sample(dtype, (3, 6), 1)
    tol = HALF_ULP.get(dtype, 0.0)
    assert_matches(one_op("scatter_add", [x, rows, upd], axis=0), [x, rows, upd], rtol=tol)
    row, one = np.array([3], dtype=np.int64), sample(dtype, (1, 6), 2)
    for kind in ("max", "min", "prod"):
        kernel = one_op("scatter_reduce", [x, rows, upd], axis=0, kind=kind)
        assert_matches(kernel, [x, rows, upd], rtol=tol)
        # one row: combined with the row it lands on and copied there, no ATen scatter
        kernel = one_op("scatter_reduce", [x, row, one], axis=0, kind=kind)
        assert_matches(kernel, [x, row, one], rtol=tol)
        assert torch.ops.aten.scatter_reduce.two not in targets(graph.trace(kernel))


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.i32], ids=str)
def test_dot(dtype):
    a, b = sample(dtype, (2, 3, 8), 0, low=-4, high=4), sample(dtype, (2, 8, 5), 1, low=-4, high=4)
    if dtype.is_float:
        a, b = np.nan_to_num(a, posinf=3, neginf=-3), np.nan_to_num(b, posinf=3, neginf=-3)
    assert_matches(one_op("dot", [a, b]), [a, b], rtol=HALF_ULP.get(dtype, 1e-6) * 4)


def test_a_computed_row_or_column_of_a_product_is_computed_once():
    """Forced into memory, where TorchInductor would inline it into the product's loop and
    compute it for every column (or row); a parameter is already there, in those strides."""
    kb = KernelBuilder("one_row_products")
    with kb.building("test.dot"):
        row, col = (
            kb.param(TensorType((2, 1, 8), DType.f32)),
            kb.param(TensorType((2, 8, 1), DType.f32)),
        )
        mat = kb.param(TensorType((2, 8, 8), DType.f32))
        outs = [
            kb.emit("dot", [kb.emit("cos", [row], {}), mat], {}),
            kb.emit("dot", [mat, kb.emit("sin", [col], {})], {}),
            kb.emit("dot", [row, mat], {}),
        ]
    kernel = kb.finish(outs)
    forced = [n for n in graph.trace(kernel).graph.nodes if n.target is _torch.force_stride_order]
    assert [n.args[0].target for n in forced] == [
        torch.ops.aten.cos.default,
        torch.ops.aten.sin.default,
        "arg0_1",
    ]
    inputs = [sample(DType.f32, p.type.shape, k) for k, p in enumerate(kernel.params)]
    assert_matches(kernel, inputs, rtol=1e-6)


def test_a_transcendental_value_broadcast_to_many_elements_is_computed_once():
    """Forced into memory, where TorchInductor would compute it again for every element it is
    broadcast to (a rotary embedding's cosines over the attention heads); not a value as cheap
    as an addition, not one broadcast to few more elements, not one already in memory."""
    kb = KernelBuilder("broadcast_values")
    with kb.building("test.broadcast"):
        angles = kb.param(TensorType((1, 64, 32), DType.f32))
        heads = kb.param(TensorType((1, 8, 64, 32), DType.f32))
        few = kb.param(TensorType((1, 2, 64, 32), DType.f32))

        def spread(value, like):
            return kb.emit("broadcast", [value], {"shape": like.shape})

        cosines = kb.emit("cos", [angles], {})
        shifted = kb.emit("add", [angles, angles], {})
        outs = [
            kb.emit("mul", [spread(cosines, heads), heads], {}),
            kb.emit("mul", [spread(shifted, heads), heads], {}),
            kb.emit("mul", [spread(kb.emit("sin", [angles], {}), few), few], {}),
            kb.emit("mul", [spread(angles, heads), heads], {}),
        ]
    kernel = kb.finish(outs)
    forced = [n for n in graph.trace(kernel).graph.nodes if n.target is _torch.force_stride_order]
    assert [n.args[0].target for n in forced] == [torch.ops.aten.cos.default]
    inputs = [sample(DType.f32, p.type.shape, k) for k, p in enumerate(kernel.params)]
    assert_matches(kernel, inputs, rtol=1e-6)


def widened_product(half, also_f32):
    """``convert(dot(convert(a, f32), convert(b, f32)), half)``, as half-float matrix products
    are lowered; ``also_f32``: the f32 product is an output too."""
    kb = KernelBuilder("widened_product")
    with kb.building("test.dot"):
        a, b = kb.param(TensorType((2, 3, 8), half)), kb.param(TensorType((2, 8, 5), half))
        wide = [kb.emit("convert", [p], {"dtype": DType.f32}) for p in (a, b)]
        product = kb.emit("dot", wide, {})
        outs = [kb.emit("convert", [product], {"dtype": half})]
    return kb.finish(outs + [product] if also_f32 else outs)


def targets(gm):
    return {n.target for n in gm.graph.nodes}


def product_dtypes(gm):
    return [n.meta["val"].dtype for n in gm.graph.nodes if n.target is torch.ops.aten.bmm.default]


@pytest.mark.parametrize("half", [DType.bf16, DType.f16], ids=str)
def test_a_large_widened_half_float_product_is_a_half_float_product(half, monkeypatch):
    """The f32 products of half floats are exact and their f32 sum is rounded once, which is
    what torch's half-float products compute. Small whole numbers: their sums are exact."""
    rng = np.random.default_rng(2)
    a, b = (rng.integers(-4, 5, shape).astype(half.numpy) for shape in ((2, 3, 8), (2, 8, 5)))
    kernel = widened_product(half, also_f32=False)
    assert product_dtypes(graph.trace(kernel)) == [torch.float32]  # small: widened is faster
    monkeypatch.setattr(graph, "HALF_PRODUCT_SIZE", 2 * 3 * 5 * 8)
    assert product_dtypes(graph.trace(kernel)) == [half.torch]
    assert_matches(kernel, [a, b])
    # the f32 product is needed as it is: it stays one
    kernel = widened_product(half, also_f32=True)
    assert product_dtypes(graph.trace(kernel)) == [torch.float32]
    assert_matches(kernel, [a, b])


@pytest.mark.parametrize(
    ("low", "high"),
    [((1, -1), (2, 0)), ((1, 2), (1, 2)), ((0, 0), (0, 0))],
    ids=["padded-and-cropped", "padded-by-the-convolution", "unpadded"],
)
def test_conv_with_strides_paddings_dilations_and_groups(low, high):
    x = sample(DType.f32, (2, 4, 9, 8))
    w = sample(DType.f32, (6, 2, 3, 2), 1)
    x, w = np.nan_to_num(x, posinf=1, neginf=-1), np.nan_to_num(w, posinf=1, neginf=-1)
    params = dict(
        stride=(2, 1), low=low, high=high, lhs_dilation=(1, 1), rhs_dilation=(1, 2), groups=2
    )
    assert_matches(one_op("conv", [x, w], **params), [x, w], rtol=1e-5)


@pytest.mark.parametrize(
    ("low", "high"),
    [((1, 1), (1, 1)), ((-1, 0), (1, 2)), ((0, 2), (2, 0))],
    ids=["padded", "padded-and-cropped", "with-unread-edges"],
)
@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16], ids=str)
def test_conv_with_a_window_larger_than_its_output(low, high, dtype):
    """The shape of a weight gradient, which runs as one. Small whole numbers: their sums are
    exact in any order."""
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, (2, 6, 9, 8)).astype(dtype.numpy)
    w = rng.integers(-3, 4, (4, 3, 6, 5)).astype(dtype.numpy)
    params = dict(
        stride=(2, 1), low=low, high=high, lhs_dilation=(1, 1), rhs_dilation=(1, 2), groups=2
    )
    kernel = one_op("conv", [x, w], **params)
    assert torch.ops.aten.convolution_backward.default in targets(graph.trace(kernel))
    assert_matches(kernel, [x, w])


CONVOLUTIONS = {torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default}


def test_a_small_images_depthwise_convolution_is_a_sum_over_its_windows():
    """A 5x5 window over a padded 2x2 image: more taps than results, but wider than the image,
    so no weight gradient; depthwise, so a sum over the windows of the padded image."""
    rng = np.random.default_rng(0)
    x, w = rng.integers(-3, 4, (2, 4, 2, 2)), rng.integers(-3, 4, (4, 1, 5, 5))
    x, w = x.astype(np.float32), w.astype(np.float32)
    none = dict(stride=(1, 1), lhs_dilation=(1, 1), rhs_dilation=(1, 1), groups=4)
    kernel = one_op("conv", [x, w], low=(2, 2), high=(2, 2), **none)
    assert not CONVOLUTIONS & targets(graph.trace(kernel))
    assert_matches(kernel, [x, w])


@pytest.mark.parametrize(
    ("stride", "low", "high", "dilation"),
    [
        ((1, 1), (2, 2), (2, 2), (1, 1)),
        ((2, 1), (1, -1), (0, 2), (1, 2)),
        ((1, 2), (0, 0), (0, 0), (2, 1)),
    ],
    ids=["padded", "strided-cropped-and-dilated", "unpadded"],
)
@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16], ids=str)
def test_a_depthwise_weight_gradient_is_a_sum_over_windows(stride, low, high, dilation, dtype):
    """The lowering of a depthwise convolution's weight gradient: one output channel per group,
    the batch (3) as each group's input channels, the output gradient as the window. Small whole
    numbers: their sums are exact in any order. The windows read the padded input from memory
    (a bounds test at every tap otherwise)."""
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 4, (1, 3 * 5, 7, 6)).astype(dtype.numpy)
    w = rng.integers(-3, 4, (5, 3, 4, 3)).astype(dtype.numpy)
    params = dict(
        stride=stride, low=low, high=high, lhs_dilation=(1, 1), rhs_dilation=dilation, groups=5
    )
    kernel = one_op("conv", [x, w], **params)
    gm = graph.trace(kernel)
    assert not CONVOLUTIONS & targets(gm)
    (forced,) = [n for n in gm.graph.nodes if n.target is _torch.force_stride_order]
    assert forced.args[0].target is torch.ops.aten.constant_pad_nd.default
    assert_matches(kernel, [x, w])


@pytest.mark.parametrize(
    ("x", "w", "params"),
    [
        (
            (2, 6, 4, 5),
            (6, 2, 3, 3),
            dict(stride=(2, 1), low=(1, 0), high=(0, 2), rhs_dilation=(1, 1), groups=3),
        ),
        (
            (1, 4, 5, 5),
            (4, 1, 3, 3),
            dict(stride=(1, 1), low=(1, 1), high=(1, 1), rhs_dilation=(1, 1), groups=4),
        ),
        (
            (1, 2, 6),
            (2, 3, 2),
            dict(stride=(3,), low=(-1,), high=(1,), rhs_dilation=(2,), groups=1),
        ),
    ],
    ids=["strided-grouped", "depthwise", "1d-dilated"],
)
def test_conv_transpose(x, w, params):
    x = np.nan_to_num(sample(DType.f32, x), posinf=1, neginf=-1)
    w = np.nan_to_num(sample(DType.f32, w, 1), posinf=1, neginf=-1)
    assert_matches(one_op("conv_transpose", [x, w], **params), [x, w], rtol=1e-5)


@pytest.mark.parametrize(
    ("stride", "low", "high"),
    [((1, 1), (0, 0), (0, 0)), ((2, 1), (1, 0), (0, -1))],
    ids=["plain", "strided-padded-and-cropped"],
)
@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16], ids=str)
def test_a_1x1_convolution_of_a_few_pixels_and_its_input_gradient_are_matrix_products(
    stride, low, high, dtype
):
    """A 2x3 image, batch 2, and a 1x1 image, batch 24 (and a 5x4 image, batch 2, which stays a
    convolution). Small whole numbers: their sums are exact in any order."""
    rng = np.random.default_rng(2)
    w = rng.integers(-3, 4, (7, 6, 1, 1)).astype(dtype.numpy)
    params = dict(stride=stride, low=low, high=high, rhs_dilation=(1, 1), groups=1)
    cases = [(2, (2, 3), True), (2, (5, 4), False)]
    if stride == (1, 1):
        cases.append((24, (1, 1), True))
    for batch, size, product in cases:
        x = rng.integers(-3, 4, (batch, 6, *size)).astype(dtype.numpy)
        kernel = one_op("conv", [x, w], lhs_dilation=(1, 1), **params)
        assert (torch.ops.aten.mm.default in targets(graph.trace(kernel))) is product
        assert bool(CONVOLUTIONS & targets(graph.trace(kernel))) is not product
        assert_matches(kernel, [x, w])
        if stride == (1, 1):  # the input gradient: a transposed convolution, the same weight
            y = rng.integers(-3, 4, (batch, 7, *size)).astype(dtype.numpy)
            kernel = one_op("conv_transpose", [y, w], **params)
            assert (torch.ops.aten.mm.default in targets(graph.trace(kernel))) is product
            assert_matches(kernel, [y, w])


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.i64, DType.bool], ids=str)
def test_iota_and_constant(dtype):
    value = ConstantData.from_array(sample(dtype, (2, 3)), dtype)
    assert_matches(one_op("constant", [], value=value), [])
    if dtype is not DType.bool:
        assert_matches(one_op("iota", [], shape=(3, 4), dtype=dtype, axis=1), [])


@pytest.mark.parametrize("shape", [(), (2, 3)], ids=["scalar", "array"])
@pytest.mark.parametrize(
    "dtype", [DType.bf16, DType.f16, DType.f32, DType.i64, DType.bool], ids=str
)
def test_constants_are_values_torchinductor_folds_into_its_loops(dtype, shape):
    """A scalar is traced as a number and a half-float array as its f32 values converted: a
    bf16 array viewed from its int16 bits is a bit cast in the loops that read it, which keeps
    TorchInductor from vectorising them."""
    value = ConstantData.from_array(sample(dtype, shape), dtype)
    kernel = one_op("constant", [], value=value)
    assert_matches(kernel, [])
    targets = {n.target for n in graph.trace(kernel).graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.view.dtype not in targets
    if not shape:
        assert targets == {torch.ops.aten.scalar_tensor.default}


def test_kernels_torch_cannot_run_here_say_why():
    state = np.zeros(4, np.uint32)
    kernel = one_op("random_bits", [state], shape=(8,), part="bits")
    assert "u32" in rules.unsupported(kernel) or "random_bits" in rules.unsupported(kernel)
    x, w = sample(DType.f32, (1, 1, 5)), sample(DType.f32, (1, 1, 2), 1)
    dilated = dict(stride=(1,), low=(0,), high=(0,), lhs_dilation=(2,), rhs_dilation=(1,), groups=1)
    assert (
        rules.unsupported(one_op("conv", [x, w], **dilated)) == "a convolution of a dilated input"
    )
