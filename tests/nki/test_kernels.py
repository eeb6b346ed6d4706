"""The pack's NKI kernels (softmax, rmsnorm) on the interpreter, against torch."""

import ml_dtypes
import numpy as np
import pytest
import torch

from nkipy_ops_nki.interpreter import run
from nkipy_ops_nki.kernels import rmsnorm, softmax

DTYPES = {
    "float32": (np.float32, torch.float32, 1e-6),
    "bfloat16": (ml_dtypes.bfloat16, torch.bfloat16, 1e-2),
}
SHAPES = [(rows, cols) for rows in (1, 128, 130, 300) for cols in (64, 512)]


def to_torch(array: np.ndarray) -> torch.Tensor:
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def sample(shape, dtype, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dtype)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax(shape, dtype):
    np_dtype, torch_dtype, tol = DTYPES[dtype]
    x = sample(shape, np_dtype)
    assert softmax.supports(shape, np_dtype) is None
    (out,) = run(softmax.softmax_kernel, [x])
    assert out.dtype == np_dtype and out.shape == shape
    expected = torch.softmax(to_torch(x).float(), dim=-1).to(torch_dtype)
    torch.testing.assert_close(to_torch(out), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("shape", SHAPES)
def test_rmsnorm(shape, dtype):
    np_dtype, torch_dtype, tol = DTYPES[dtype]
    x, w, eps = sample(shape, np_dtype), sample(shape[1:], np_dtype, seed=1), 1e-6
    assert rmsnorm.supports(shape, torch_dtype) is None
    (out,) = run(rmsnorm.rmsnorm_kernel, [x, w, eps])
    assert out.dtype == np_dtype and out.shape == shape
    xf, wf = to_torch(x).float(), to_torch(w).float()
    expected = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * wf).to(torch_dtype)
    torch.testing.assert_close(to_torch(out), expected, rtol=tol, atol=tol)


def test_softmax_is_stable_for_large_inputs():
    x = np.array([[1000.0, 1001.0, 1002.0]], np.float32)
    (out,) = run(softmax.softmax_kernel, [x])
    np.testing.assert_allclose(out, torch.softmax(torch.from_numpy(x), -1).numpy(), rtol=1e-6)


@pytest.mark.parametrize("module", [softmax, rmsnorm])
def test_supports_declines_what_the_kernel_does_not_tile(module):
    assert module.supports((4, module.MAX_COLS), torch.float32) is None
    too_wide = module.supports((4, module.MAX_COLS + 1), torch.float32)
    assert f"rows of {module.MAX_COLS + 1} elements exceed {module.MAX_COLS}" in too_wide
    assert "2-D" in module.supports((2, 3, 4), np.float32)
    assert "int32" in module.supports((4, 8), torch.int32)
    assert "empty" in module.supports((0, 8), np.float32)


def test_the_widest_supported_rows_fit_sbuf():
    x = sample((2, softmax.MAX_COLS), np.float32)
    (out,) = run(softmax.softmax_kernel, [x])
    np.testing.assert_allclose(out.sum(axis=-1), 1, rtol=1e-5)
    x = sample((2, rmsnorm.MAX_COLS), np.float32)
    (out,) = run(rmsnorm.rmsnorm_kernel, [x, np.ones(rmsnorm.MAX_COLS, np.float32), 1e-6])
    np.testing.assert_allclose(np.mean(out * out, axis=-1), 1, rtol=1e-5)
