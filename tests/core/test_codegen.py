"""What the generated NumPy code does beyond one line per op: view composition and squares (IR
passes), values computed once at load time, and broadcasts left to NumPy. Each result is checked against
NumPy on the same inputs, and the source is read for what it must (not) compute per call."""

import re
import warnings

import numpy as np
import pytest
import torch
from ir_trace import trace

from nkipy_core import knp
from nkipy_core.ir import DType, TensorType, codegen
from nkipy_core.runtime.cpu import CpuRuntime

F32 = DType.f32


def body(source: str) -> str:
    """The lines of ``def kernel``: what runs on every call."""
    return source.split("\ndef kernel(")[1].split("\n\n")[0]


def shared(source: str) -> str:
    """The module-level lines computed once, at load time."""
    return (
        source.split("# values that depend on no input")[1].split("\ndef kernel(")[0]
        if "# values" in source
        else ""
    )


def test_chained_views_become_one():
    kernel = trace(
        lambda x: x.reshape(2, 12).reshape(4, 6).transpose(1, 0).transpose(1, 0).reshape(3, 8),
        TensorType((24,), F32),
    )
    assert [op.prim for op in kernel.ops] == ["reshape"]
    x = np.arange(24, dtype=np.float32)
    np.testing.assert_array_equal(codegen.load(codegen.generate(kernel))(x)[0], x.reshape(3, 8))


def test_transposes_compose_and_cancel():
    kernel = trace(
        lambda x: (
            x.transpose(1, 2, 0).transpose(2, 0, 1),
            x.transpose(2, 0, 1).transpose(0, 2, 1),
        ),
        TensorType((2, 3, 4), F32),
    )
    assert [op.prim for op in kernel.ops] == ["transpose"]  # the first pair is the identity
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    same, swapped = codegen.load(codegen.generate(kernel))(x)
    np.testing.assert_array_equal(same, x)
    np.testing.assert_array_equal(swapped, x.transpose(2, 0, 1).transpose(0, 2, 1))


def causal_scores(x):
    """A causal mask built from iotas and constants, applied to ``x``: the mask needs no input."""
    n = x.shape[-1]
    rows, cols = knp.reshape(knp.arange(n), (n, 1)), knp.reshape(knp.arange(n), (1, n))
    return knp.where(cols <= rows, x * 0.5, -np.inf)


def test_values_of_constants_alone_are_computed_once_at_load_time():
    kernel = trace(causal_scores, TensorType((2, 4, 4), F32))
    source = codegen.generate(kernel)
    assert "np.arange" in shared(source) and "np.arange" not in body(source)
    assert "<=" in shared(source)  # the mask itself, not only its sources
    x = np.random.default_rng(0).standard_normal((2, 4, 4)).astype(np.float32)
    expected = np.where(np.tril(np.ones((4, 4), bool)), x * np.float32(0.5), -np.inf)
    fn = codegen.load(source)
    for _ in range(2):  # the shared values are not consumed by a call
        np.testing.assert_array_equal(fn(x)[0], expected)


def test_loading_a_kernel_computes_its_shared_values_without_floating_point_warnings():
    # log(0) at load time: a call would run it under np.errstate(all="ignore"), and so does loading
    kernel = trace(lambda x: x + knp.log(knp.arange(3, DType.f32)), TensorType((3,), F32))
    source = codegen.generate(kernel)
    assert "np.log" in shared(source)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn = codegen.load(source)
    np.testing.assert_array_equal(
        fn(np.ones(3, np.float32))[0], [-np.inf, 1, 1 + np.log(np.float32(2))]
    )


def test_a_value_too_large_to_hold_is_computed_per_call(monkeypatch):
    monkeypatch.setattr(codegen, "HOIST_LIMIT", 8)
    source = codegen.generate(trace(causal_scores, TensorType((2, 4, 4), F32)))
    assert "<=" in body(source)  # 16 bools: over the limit
    assert "np.arange" in shared(source)  # views cost nothing to hold


def test_a_load_time_result_is_read_only_and_the_runtime_copies_it():
    kernel = trace(
        lambda x: (x + 1, knp.reshape(knp.arange(6, DType.f32), (2, 3))), TensorType((2, 3), F32)
    )
    source = codegen.generate(kernel)
    _, constant = codegen.load(source)(np.zeros((2, 3), np.float32))
    assert not constant.flags.writeable
    runtime = CpuRuntime()
    executable = runtime.compile(kernel, None)
    first = runtime.run_host(executable, [np.zeros((2, 3), np.float32)])[1]
    first[...] = -1  # the caller owns what it got
    second = runtime.run_host(executable, [np.zeros((2, 3), np.float32)])[1]
    np.testing.assert_array_equal(second, np.arange(6, dtype=np.float32).reshape(2, 3))


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16])
def test_elementwise_ops_take_broadcast_operands_unmaterialised(dtype):
    def fn(x, row, col):
        return (x * row + col, knp.where(x > 0, x, knp.zeros((), dtype)))

    types = [TensorType((3, 4), dtype), TensorType((4,), dtype), TensorType((3, 1), dtype)]
    source = codegen.generate(trace(fn, *types))
    assert "broadcast_to" not in source.split("def kernel(")[-1]
    rng = np.random.default_rng(0)
    x, row, col = (rng.standard_normal(t.shape).astype(dtype.numpy) for t in types)
    product, clipped = codegen.load(source)(x, row, col)
    # bf16 rounds after each op, as torch does
    expected = (x * row).astype(dtype.numpy) + col
    assert product.shape == (3, 4) and product.dtype == dtype.numpy
    np.testing.assert_array_equal(product, expected.astype(dtype.numpy))
    np.testing.assert_array_equal(clipped, np.where(x > 0, x, 0).astype(dtype.numpy))


def test_a_broadcast_stays_where_numpy_would_not_reach_the_shape():
    # both operands come from a [3] vector: implicit broadcasting would give [3], not [2, 3]
    kernel = trace(
        lambda v: knp.broadcast_to(v, (2, 3)) + knp.broadcast_to(v * 2, (2, 3)),
        TensorType((3,), F32),
    )
    source = codegen.generate(kernel)
    assert "broadcast_to" in body(source)
    v = np.arange(3, dtype=np.float32)
    (out,) = codegen.load(source)(v)
    assert out.shape == (2, 3)
    np.testing.assert_array_equal(out, np.broadcast_to(v + v * 2, (2, 3)))


def test_outer_broadcasts_meet_in_numpy():
    # [3, 1] and [1, 4] broadcast each other to the op's [3, 4]: neither is materialised
    kernel = trace(
        lambda a, b: knp.broadcast_to(a, (3, 4)) - knp.broadcast_to(b, (3, 4)),
        TensorType((3, 1), F32),
        TensorType((1, 4), F32),
    )
    source = codegen.generate(kernel)
    assert "broadcast_to" not in body(source)
    a, b = (
        np.arange(3, dtype=np.float32).reshape(3, 1),
        np.arange(4, dtype=np.float32).reshape(1, 4),
    )
    np.testing.assert_array_equal(codegen.load(source)(a, b)[0], a - b)


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.i32])
def test_a_square_is_a_multiplication_as_in_torch(dtype):
    kernel = trace(lambda x: (knp.power(x, 2), knp.power(x, 3)), TensorType((1000,), dtype))
    assert [op.prim for op in kernel.ops].count("pow") == 1  # the cube stays a pow
    x = torch.randn(1000).mul(50).to(dtype.torch)
    square, cube = codegen.load(codegen.generate(kernel))(x.float().numpy().astype(dtype.numpy))
    # torch's CPU pow multiplies for an exponent of 2: the kernel matches it bit for bit
    np.testing.assert_array_equal(
        torch.from_numpy(square.astype(np.float64)), torch.pow(x, 2).double()
    )
    np.testing.assert_allclose(cube.astype(np.float64), torch.pow(x, 3).double(), rtol=1e-2)


def test_a_linear_layer_on_a_few_rows_walks_its_weight_in_its_own_order():
    """``x @ w.T`` of at most 64 rows with a weight of at least 65536 elements is computed as
    ``(w @ x.T).T`` (``_skinny_matmul``), into a dead buffer where ``np.matmul`` would write;
    more rows keep ``np.matmul``. The results are row-major and equal NumPy's product."""

    def fn(x, w, tall):
        h = x @ w.transpose(1, 0)
        scaled = x * knp.sum(h, axis=1, keepdims=True)
        return scaled @ w.transpose(1, 0), tall @ w.transpose(1, 0)

    types = [TensorType((8, 256), F32), TensorType((512, 256), F32), TensorType((128, 256), F32)]
    source = codegen.generate(trace(fn, *types))
    lines = body(source)
    assert lines.count("_skinny_matmul(") == 2, lines
    assert re.search(r"_skinny_matmul\(v\d+, v\d+, v\d+\)", lines), lines  # into h's buffer
    assert lines.count("np.matmul(") == 1, lines
    rng = np.random.default_rng(0)
    x, w, tall = (rng.standard_normal(t.shape).astype(np.float32) for t in types)
    got = codegen.load(source)(x, w, tall)
    h = x @ w.T
    for g, want in zip(got, ((x * h.sum(1, keepdims=True)) @ w.T, tall @ w.T), strict=True):
        assert g.flags.c_contiguous
        # summed in another order than NumPy's: the rounding is of the terms' scale, and the
        # second product's terms (the first one's sums times x) cancel to far smaller results
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
