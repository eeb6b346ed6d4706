"""The NKI interpreter runs the constructs NKI kernels are written with, checked against NumPy/torch."""

import ml_dtypes
import numpy as np
import pytest
import torch
from nki_tutorial import tensor_add_kernel

import nkipy_ops_nki.nki.isa as nisa
import nkipy_ops_nki.nki.language as nl
from nkipy_ops_nki.interpreter import SpmdDim, run

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def test_tensor_add_one_tile():
    a, b = rand(128, 512), rand(128, 512)
    (c,) = run(tensor_add_kernel, [a, b])
    np.testing.assert_array_equal(c, a + b)


def spmd_add_kernel(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    cols = nl.program_id(1) * 512 + nl.arange(512)[None, :]
    nl.store(c[rows, cols], value=nl.add(nl.load(a[rows, cols]), nl.load(b[rows, cols])))
    return c


def test_spmd_grid_programs_store_into_one_output():
    a, b = rand(256, 1024), rand(256, 1024)
    (c,) = run(spmd_add_kernel, [a, b], grid=(2, 2))
    np.testing.assert_array_equal(c, a + b)


def spmd_nc_kernel(a, seen):
    seen.append((nl.program_id(0), nl.num_programs(0), nl.program_ndim()))
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(c[i * 128 : (i + 1) * 128, :], value=nl.load(a[i * 128 : (i + 1) * 128, :]) * 2.0)
    return c


def test_spmd_dim_over_two_cores_runs_every_program_id():
    gx = 2
    a, seen = rand(128 * 2 * gx, 64), []
    grid = [nl.spmd_dim(gx, nl.nc(2))]
    assert grid[0] == SpmdDim(gx, 2) and grid[0].size == 4
    (c,) = run(spmd_nc_kernel, [a, seen], grid=grid)
    assert seen == [(p, 2 * gx, 1) for p in range(2 * gx)]
    np.testing.assert_array_equal(c, a * 2)


def out_param_add_kernel(a, b, c):
    for i in nl.affine_range(a.shape[0] // 128):
        tile = nl.load(a[i * 128 : (i + 1) * 128, ...]) - nl.load(b[i * 128 : (i + 1) * 128, ...])
        nl.store(c[i * 128 : (i + 1) * 128, ...], value=tile)


def test_out_param_kernel_writes_the_callers_array():
    a, b, c = rand(256, 32), rand(256, 32), np.zeros((256, 32), np.float32)
    assert run(out_param_add_kernel, [a, b, c]) == []
    np.testing.assert_array_equal(c, a - b)


def masked_copy_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows, cols = a.shape
    ip, iy = nl.mgrid[0:128, 0:cols]
    for t in nl.affine_range((rows + 127) // 128):
        row = t * 128 + ip
        tile = nl.load(a[row, iy], mask=(row < rows))
        nl.store(out[row, iy], value=nl.exp(tile, mask=(row < rows)), mask=(row < rows) & (iy >= 0))
    return out


def test_masks_cover_a_partial_last_tile():
    a = rand(300, 16)
    (out,) = run(masked_copy_kernel, [a])
    np.testing.assert_allclose(out, np.exp(a), rtol=1e-6)


def test_masked_out_elements_are_not_read_and_ops_give_zero_there():
    def kernel(a):
        ix = nl.arange(128)[:, None]
        iy = nl.arange(8)[None, :]
        tile = nl.load(a[ix, iy], mask=(ix < 100))
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(tile, 1.0, mask=(iy < 4)))
        return out

    a = rand(100, 8)
    (out,) = run(kernel, [a])
    expected = np.zeros((128, 8), np.float32)
    expected[:, :4] = 1
    expected[:100, :4] += a[:, :4]
    np.testing.assert_array_equal(out, expected)


def ranges_kernel(a):
    """Column sums of 4 blocks accumulated in order, over the three loop kinds with ranges."""
    acc = nl.zeros((128, 16), nl.float32)
    for j in nl.sequential_range(0, 4, 1):
        acc[...] = acc + nl.load(a[:, j * 16 : (j + 1) * 16])
    for k in nl.static_range(1, 4, 2):
        acc[:, k : k + 1] = acc[:, k : k + 1] * 10
    out = nl.ndarray((128, 16), dtype=a.dtype, buffer=nl.shared_hbm)
    for _ in nl.affine_range(1):
        nl.store(out, value=acc)
    return out


def test_loop_ranges_with_start_stop_step():
    a = rand(128, 64)
    (out,) = run(ranges_kernel, [a])
    expected = a.reshape(128, 4, 16).sum(axis=1)
    expected[:, [1, 3]] *= 10
    np.testing.assert_allclose(out, expected, rtol=1e-6)


ACTIVATIONS = {
    "exp": torch.exp,
    "log": lambda t: torch.log(t.abs() + 1),
    "sqrt": lambda t: torch.sqrt(t.abs()),
    "rsqrt": lambda t: torch.rsqrt(t.abs() + 1),
    "reciprocal": lambda t: 1 / (t.abs() + 1),
    "abs": torch.abs,
    "negative": torch.neg,
    "square": torch.square,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "gelu_apprx_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
    "silu": torch.nn.functional.silu,
    "softplus": torch.nn.functional.softplus,
    "sin": torch.sin,
    "cos": torch.cos,
    "erf": torch.erf,
    "sign": torch.sign,
    "floor": torch.floor,
    "ceil": torch.ceil,
}
NEEDS_POSITIVE = {"log", "sqrt", "rsqrt", "reciprocal"}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_match_torch(name):
    def kernel(a):
        tile = nl.load(a)
        if name in NEEDS_POSITIVE:
            tile = nl.abs(tile) + 1 if name != "sqrt" else nl.abs(tile)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=getattr(nl, name)(tile))
        return out

    a = rand(128, 64) * 3
    (out,) = run(kernel, [a])
    np.testing.assert_allclose(
        out, ACTIVATIONS[name](torch.from_numpy(a)).numpy(), rtol=2e-6, atol=1e-6
    )


BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_and_their_dtype_argument(name):
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=getattr(nl, name)(nl.load(a), nl.load(b), dtype=nl.float32))
        return out

    a, b = np.round(rand(128, 32)), np.round(rand(128, 32))
    b[b == 0] = 0.5
    (out,) = run(kernel, [a, b])
    np.testing.assert_array_equal(out, BINARY[name](a, b).astype(np.float32))


def test_operators_power_where_select_logical_not_and_copy():
    def kernel(a):
        t = nl.load(a)
        out = nl.ndarray((6, 128, 32), dtype=a.dtype, buffer=nl.shared_hbm)
        results = [
            t**2,
            2.0**t,
            nl.power(t, 3.0),
            nl.where(t > 0, t, -t),
            nl.select(t <= 0, 0.0, t),
        ]
        results.append(nl.copy(nl.logical_not(t == 1.0) * (t != 2.0) * (1.0 - t / 2 + t * 3 - -t)))
        for k, r in enumerate(results):
            nl.store(out[k], value=r)
        return out

    a = np.round(rand(128, 32) * 2)
    (out,) = run(kernel, [a])
    expected = [
        a**2,
        2.0**a,
        a**3,
        np.abs(a),
        np.maximum(a, 0),
        (a != 1) * (a != 2) * (1 - a / 2 + a * 3 + a),
    ]
    np.testing.assert_allclose(out, np.stack(expected).astype(np.float32), rtol=1e-6)


def test_bf16_in_and_out_rounds_like_torch():
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ta, tb = nl.load(a), nl.load(b)
        result = nl.exp(ta) * tb + 1.0
        assert result.dtype == nl.bfloat16 and nl.exp(ta, dtype=nl.float32).dtype == nl.float32
        nl.store(out, value=result)
        return out

    a, b = rand(128, 64, dtype=ml_dtypes.bfloat16), rand(128, 64, dtype=ml_dtypes.bfloat16)
    (out,) = run(kernel, [a, b])
    assert out.dtype == nl.bfloat16
    ta, tb = (torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) for x in (a, b))
    # each op computes in fp32 and rounds its bf16 result once, as torch's bf16 ops do
    expected = torch.exp(ta.float()).to(torch.bfloat16) * tb + 1.0
    np.testing.assert_array_equal(out, expected.view(torch.int16).numpy().view(ml_dtypes.bfloat16))


def matmul_kernel(a, b):
    """[M, K] @ [K, N] with K in blocks of 128 accumulated in one PSUM tile."""
    m, k = a.shape
    n = b.shape[1]
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((m, n), nl.float32, buffer=nl.psum)
    for kt in nl.affine_range(k // 128):
        acc += nl.matmul(
            nl.load(a[:, kt * 128 : (kt + 1) * 128]), nl.load(b[kt * 128 : (kt + 1) * 128, :])
        )
    nl.store(out, value=acc)
    return out


def nc_matmul_kernel(a_t, b):
    """The same product from a stored transposed ([K, M]): nisa.nc_matmul and transpose_x."""
    k, m = a_t.shape
    out = nl.ndarray((2, m, b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((m, b.shape[1]), nl.float32, buffer=nl.psum)
    acc2 = nl.zeros((m, b.shape[1]), nl.float32, buffer=nl.psum)
    for kt in nl.sequential_range(k // 128):
        rows = kt * 128 + nl.arange(128)[:, None]
        stationary = nl.load(a_t[rows, nl.arange(m)[None, :]])
        moving = nl.load(b[rows, nl.arange(b.shape[1])[None, :]])
        acc += nisa.nc_matmul(stationary, moving)
        acc2[...] += nl.matmul(stationary, moving, transpose_x=True)
    assert acc.buffer == nl.psum and acc.dtype == nl.float32
    nl.store(out[0], value=acc)
    nl.store(out[1], value=acc2)
    return out


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_matmul_accumulates_k_tiles_in_psum(dtype):
    a, b = rand(64, 384, dtype=dtype), rand(384, 512, dtype=dtype)
    expected = a.astype(np.float32) @ b.astype(np.float32)
    (out,) = run(matmul_kernel, [a, b])
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    (out2,) = run(nc_matmul_kernel, [np.ascontiguousarray(a.T), b])
    np.testing.assert_allclose(out2, np.stack([expected, expected]), rtol=1e-4, atol=1e-4)


def test_transpose_and_nc_transpose():
    def kernel(a):
        out = nl.ndarray((2, a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
        tile = nl.load(a)
        nl.store(out[0], value=nl.transpose(tile))
        nl.store(out[1], value=nisa.nc_transpose(tile))
        return out

    a = rand(128, 96)
    (out,) = run(kernel, [a])
    np.testing.assert_array_equal(out, np.stack([a.T, a.T]))


@pytest.mark.parametrize("name", ["sum", "max", "min", "mean", "prod"])
@pytest.mark.parametrize(
    ("axis", "keepdims"), [(1, True), (-1, False), ((1, 2), True), ((1, 2), False)]
)
def test_reductions_over_free_axes(name, axis, keepdims):
    def kernel(a):
        result = getattr(nl, name)(nl.load(a), axis=axis, keepdims=keepdims)
        out = nl.ndarray(result.shape, dtype=result.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=result)
        return out

    a = rand(128, 4, 6) * 0.5 + 1
    (out,) = run(kernel, [a])
    np.testing.assert_allclose(out, getattr(np, name)(a, axis=axis, keepdims=keepdims), rtol=1e-5)


def test_tiles_written_through_index_grids_and_broadcast():
    def kernel(w):
        ix, iy = nl.arange(128)[:, None], nl.arange(8)[None, :]
        tile = nl.full((128, 8), 5.0, nl.float32)
        tile[ix, iy + 0] = nl.zeros_like(tile) + ix
        ones = nl.ones((nl.par_dim(128), 8), nl.int32)
        row = nl.broadcast_to(nl.load(w.reshape((1, 8))), (128, 8))
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.hbm)
        nl.store(out[...], value=tile * ones + row)
        return out

    w = rand(8)
    (out,) = run(kernel, [w])
    np.testing.assert_array_equal(out, np.arange(128, dtype=np.float32)[:, None] + w[None, :])


def test_program_queries_without_a_grid_and_on_a_2d_grid():
    seen = []

    def kernel(seen):
        seen.append((nl.program_ndim(), nl.program_id(0), nl.num_programs(0)))

    assert run(kernel, [seen]) == []
    run(kernel, [seen], grid=(3, 2))
    assert seen[0] == (0, 0, 1)
    assert seen[1:] == [(2, p, 3) for p in range(3) for _ in range(2)]


def test_tuple_returns_and_one_allocation_per_call_site_and_occurrence():
    def kernel(a):
        outs = [nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm) for _ in range(2)]
        p = nl.program_id(0)
        nl.store(outs[0][p], value=nl.load(a[p]) + 1.0)
        nl.store(outs[1][p], value=nl.load(a[p]) * 2.0)
        return tuple(outs)

    a = rand(4, 128, 16)
    first, second = run(kernel, [a], grid=(4,))
    np.testing.assert_array_equal(first, a + 1)
    np.testing.assert_array_equal(second, a * 2)
