"""The NKIPy IR: type inference, the verifier, simplification and standalone kernel.py."""

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch

from nkipy_core import VerificationError, knp
from nkipy_core.ir import DType, Kernel, KernelBuilder, Op, TensorType, Value, codegen, verify
from nkipy_core.ir.passes import simplify
from nkipy_core.ir.printer import format_kernel

F32 = DType.f32


def softmax(x, axis=-1):
    e = knp.exp(x - knp.max(x, axis=axis, keepdims=True))
    return e / knp.sum(e, axis=axis, keepdims=True)


def trace(fn, *types):
    builder = KernelBuilder("k")
    params = [builder.param(t) for t in types]
    with builder.building("test"):
        out = fn(*params)
    return builder.finish(out if isinstance(out, tuple) else (out,))


def test_rule_runs_as_plain_numpy():
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    expected = np.exp(x - x.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    out = softmax(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_traced_kernel_matches_numpy_and_infers_types():
    kernel = trace(
        lambda x: (softmax(x), x[1:, ::2].T, knp.matmul(x, x.T)), TensorType((3, 4), F32)
    )
    verify(kernel)
    assert [str(t) for t in kernel.output_types] == ["f32[3x4]", "f32[2x2]", "f32[3x3]"]
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    outs = codegen.load(codegen.generate(kernel))(x)
    np.testing.assert_allclose(outs[0], softmax(x), rtol=1e-6)
    np.testing.assert_array_equal(outs[1], x[1:, ::2].T)
    np.testing.assert_allclose(outs[2], x @ x.T, rtol=1e-6)


def test_type_promotion_follows_torch():
    ints = np.arange(4, dtype=np.int32)
    assert (ints + 1.5).dtype == np.float64  # NumPy's rule ...
    assert knp.add(ints, 1.5).dtype == np.float32  # ... is not torch's, which knp follows
    assert knp.divide(ints, ints).dtype == np.float32
    assert knp.add(np.ones(2, ml_dtypes.bfloat16), np.ones(2, np.float32)).dtype == np.float32


def test_python_scalars_keep_full_precision_against_f64():
    """A Python float is a double, as in torch: it must not round through f32 on its way."""
    x = np.ones(2)
    assert knp.multiply(x, 676.520368121885098567)[0] == 676.520368121885098567
    assert knp.astype(0.1, DType.f64) == np.float64(0.1)


def test_polyval_matches_numpy_traced_and_untraced():
    coefficients = (2.5, -1.0, 0.0, 3.0)
    x = np.linspace(-2, 2, 7, dtype=np.float32)
    np.testing.assert_allclose(knp.polyval(coefficients, x), np.polyval(coefficients, x), rtol=1e-6)
    (out,) = codegen.load(
        codegen.generate(trace(lambda a: knp.polyval(coefficients, a), TensorType((7,), F32)))
    )(x)
    np.testing.assert_allclose(out, np.polyval(coefficients, x), rtol=1e-6)
    with pytest.raises(ValueError, match="degree >= 1"):
        knp.polyval((1.0,), x)


def test_new_scans_and_scatters_follow_numpy():
    x = np.array([[1.0, np.nan, 0.5], [2.0, -1.0, 3.0]], np.float32)
    np.testing.assert_array_equal(knp.cummax(x, 1), [[1.0, np.nan, np.nan], [2.0, 2.0, 3.0]])
    np.testing.assert_array_equal(knp.cummin(x, 0), [[1.0, np.nan, 0.5], [1.0, np.nan, 0.5]])
    base = np.zeros((3, 2), np.float32)
    index, updates = (
        np.array([2, 0, 2]),
        np.array([[1.0, 5.0], [2.0, 2.0], [4.0, -1.0]], np.float32),
    )
    np.testing.assert_array_equal(
        knp.scatter_reduce(base, index, updates, "max"), [[2, 2], [0, 0], [4, 5]]
    )
    np.testing.assert_array_equal(
        knp.scatter_reduce(base + 1, index, updates, "prod"), [[2, 2], [1, 1], [4, -5]]
    )
    np.testing.assert_array_equal(
        knp.signbit(np.array([-0.0, 0.0, -np.nan, 1.0], np.float32)), [True, False, True, False]
    )
    with pytest.raises(VerificationError, match="scatter_reduce: unknown kind 'mean'"):
        trace(
            lambda a: knp.scatter_reduce(a, np.array([0]), a[:1], "mean"), TensorType((3, 2), F32)
        )


def test_bf16_computes_in_f32_and_rounds_once_per_op():
    x = np.linspace(-3, 3, 64, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(8, 8)
    kernel = trace(lambda a: knp.exp(a) * a, TensorType((8, 8), DType.bf16))
    (out,) = codegen.load(codegen.generate(kernel))(x)
    assert out.dtype == ml_dtypes.bfloat16
    ref = np.exp(x.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32) * x.astype(
        np.float32
    )
    np.testing.assert_array_equal(out, ref.astype(ml_dtypes.bfloat16))


#: closer to the next half float than to 1.0, but rounded to f32 first they are a tie that goes to 1.0
DOUBLE_ROUNDED = {DType.f16: 1 + 2.0**-11 + 2.0**-40, DType.bf16: 1 + 2.0**-8 + 2.0**-40}


@pytest.mark.parametrize("dtype", list(DOUBLE_ROUNDED))
def test_a_double_becomes_a_half_float_through_f32_as_in_torch(dtype):
    value = DOUBLE_ROUNDED[dtype]
    expected = torch.tensor(value, dtype=torch.float64).to(dtype.torch)
    assert expected.item() == 1.0  # NumPy's direct cast would give the next half float
    assert float(dtype.scalar(value)) == expected.item()
    assert float(knp.asarray(value, dtype)) == expected.item()
    assert float(knp.astype(np.float64(value), dtype)) == expected.item()
    builder = KernelBuilder("k")
    x = builder.param(TensorType((), DType.f64))
    with builder.building("test"):
        kernel = builder.finish([knp.astype(x, dtype)])
    assert float(codegen.load(codegen.generate(kernel))(np.float64(value))[0]) == expected.item()


def test_ill_typed_primitive_is_rejected_when_built():
    with pytest.raises(
        VerificationError,
        match=r"ill-typed dot while lowering test: dot: contraction mismatch: f32\[3x4\] @ f32\[3x4\]",
    ):
        trace(lambda x: knp.matmul(x, x), TensorType((3, 4), F32))


def test_verifier_rejects_wrong_result_type_and_undefined_operands():
    x = Value(0, TensorType((2,), F32))
    bad_type = Kernel(
        "k",
        [x],
        [Op("exp", [x], {}, Value(1, TensorType((3,), F32)), "aten::exp via my_rule")],
        [Value(1, TensorType((3,), F32))],
    )
    with pytest.raises(
        VerificationError,
        match=r"built by aten::exp via my_rule\): result type should be f32\[2\], not f32\[3\]",
    ):
        verify(bad_type)
    ghost = Value(7, TensorType((2,), F32))
    undefined = Kernel(
        "k",
        [x],
        [Op("exp", [ghost], {}, Value(1, TensorType((2,), F32)))],
        [Value(1, TensorType((2,), F32))],
    )
    with pytest.raises(VerificationError, match="used before it is defined"):
        verify(undefined)


def test_simplify_folds_constants_dedups_and_drops_dead_code():
    def fn(x):
        unused = knp.exp(x)  # noqa: F841 - dead code to remove
        two = knp.add(np.float32(1), np.float32(1))  # folds to a constant
        return knp.exp(x) * two + knp.exp(x)  # two identical exps: one after CSE

    kernel = trace(fn, TensorType((4,), F32))
    simple = simplify(kernel)
    verify(simple)
    prims = [op.prim for op in simple.ops]
    assert prims.count("exp") == 1
    assert "add" in prims and len(simple.ops) < len(kernel.ops)
    x = np.arange(4, dtype=np.float32)
    before = codegen.load(codegen.generate(kernel))(x)[0]
    after = codegen.load(codegen.generate(simple))(x)[0]
    np.testing.assert_allclose(after, before)
    np.testing.assert_allclose(after, np.exp(x) * 3, rtol=1e-6)


@pytest.mark.parametrize("ufunc", [np.add, np.maximum, np.minimum, np.multiply])
@pytest.mark.parametrize(
    "index",
    [[3], [0, 2, 4], [4, 0, 1], [-1, 0, -3], [2, 0, 2], [-1, 4], [1, 1, 1, 1]],
    ids=["one", "increasing", "unordered", "negative", "repeated", "wrapping", "all-same"],
)
@pytest.mark.parametrize("axis0", [False, True])
def test_scatters_combine_each_update_once_as_ufunc_at_does(ufunc, index, axis0):
    from nkipy_core.ir.numpy_support import _scatter_reduce

    rng = np.random.default_rng(len(index))
    x = rng.standard_normal((2, 5, 3)).astype(np.float32)
    updates = rng.standard_normal((2, len(index), 3)).astype(np.float32)
    position = np.s_[:, np.array(index)]
    if axis0:  # written ``np.s_[i]``: the index array itself, not a tuple
        x, updates, position = x[0], updates[0], np.array(index)
    expected = x.copy()
    ufunc.at(expected, position, updates)
    np.testing.assert_array_equal(_scatter_reduce(x, position, updates, ufunc), expected)


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.f16])
def test_multiplications_by_one_are_their_operand_bit_for_bit(dtype):
    one = np.ones((), dtype.numpy)

    def fn(x, y):
        return x * one, knp.multiply(one, x) + y, (x / one) * y, knp.broadcast_to(one, (4, 4)) * x

    kernel = simplify(trace(fn, TensorType((4, 4), dtype), TensorType((4, 4), dtype)))
    verify(kernel)
    assert [op.prim for op in kernel.ops] == ["add", "mul"]
    assert kernel.outputs[0] is kernel.params[0] and kernel.outputs[3] is kernel.params[0]
    special = [np.nan, -0.0, np.inf, -np.inf]
    x = np.array(special * 4, dtype.numpy).reshape(4, 4)
    y = np.arange(16).astype(dtype.numpy).reshape(4, 4)
    got = codegen.load(codegen.generate(kernel))(x, y)
    for result, expected in zip(got, (x, x + y, x * y, x), strict=True):
        np.testing.assert_array_equal(result.view(np.uint8), expected.view(np.uint8))


def test_ir_text_is_stable_and_readable():
    kernel = trace(lambda x: knp.exp(x), TensorType((2, 3), F32))
    text = format_kernel(kernel)
    assert "kernel k(%v0: f32[2x3])" in text
    assert "%v1: f32[2x3] = exp(%v0)  # test" in text
    assert format_kernel(kernel, with_origin=False) == format_kernel(
        trace(lambda x: knp.exp(x), TensorType((2, 3), F32)), with_origin=False
    )


def test_kernel_py_runs_standalone_with_numpy(tmp_path):
    big = np.arange(600, dtype=np.float32).reshape(20, 30)  # large enough to be stored as a blob
    kernel = trace(
        lambda x: (knp.add(x, big), knp.astype(x, DType.bf16)), TensorType((20, 30), F32)
    )
    path = tmp_path / "kernel.py"
    path.write_text(codegen.generate(kernel))
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["float32 (20, 30)", "bfloat16 (20, 30)"]


@pytest.mark.parametrize("dtype", [DType.u8, DType.i8, DType.i16, DType.i32, DType.i64])
@pytest.mark.parametrize("value", [-1, 300, -129, 2**40 + 7, 2**63 - 1, -(2**63)])
def test_an_integer_out_of_range_wraps_as_torch_converts_it(dtype, value):
    """``masked_fill(m, -1)`` on u8 fills 255 in torch; NumPy would raise instead."""
    expected = torch.full((), value, dtype=torch.int64).to(dtype.torch).item()
    assert int(dtype.scalar(value)) == expected
