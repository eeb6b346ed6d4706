"""Fractional max pooling compiled in strict mode against eager, forward and backward, with the
random samples given (``_random_samples``), so the windows and hence values and indices are
eager's exactly."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F


def pool(x, kernel, out, samples):
    fn = F.fractional_max_pool2d if len(kernel) == 2 else F.fractional_max_pool3d
    return fn(x, kernel, output_size=out, return_indices=True, _random_samples=samples)


def with_edges(x):
    """Infinities, a NaN pair in one window, zeros and large values among ``x``'s values."""
    flat = x.view(-1)
    flat[:4] = torch.tensor([math.nan, 0.0, math.inf, -math.inf])
    flat[-3:] = torch.tensor([3e38, -3e38, -0.0]).to(x.dtype) if x.dtype != torch.bfloat16 else 1e30
    flat[x.shape[-1] + 1] = math.nan
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize(
    ("shape", "kernel", "out"),
    [
        ((2, 3, 11, 9), (3, 2), (4, 5)),
        ((3, 7, 8), (2, 2), (3, 1)),  # unbatched; one window along the width
        ((1, 2, 7, 8, 9), (2, 3, 2), (3, 4, 5)),
        ((2, 6, 6, 6), (2, 2, 2), (4, 4, 4)),  # unbatched 3-d
    ],
)
def test_matches_eager_forward_and_backward(dtype, shape, kernel, out):
    generator = torch.Generator().manual_seed(0)
    x = with_edges(torch.randn(shape, generator=generator) * 10).to(dtype).requires_grad_()
    batch = shape[0] if len(shape) == len(kernel) + 2 else 1
    samples = torch.rand(batch, shape[-len(kernel) - 1], len(kernel), generator=generator)
    samples = samples.to(dtype)
    compiled = torch.compile(pool, backend="nkipy", options={"strict": True}, dynamic=False)
    expected, got = pool(x, kernel, out, samples), compiled(x, kernel, out, samples)
    torch.testing.assert_close(got[0], expected[0], rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got[1], expected[1])
    cotangent = torch.randn(expected[0].shape, generator=generator, dtype=dtype)
    (grad_expected,) = torch.autograd.grad(expected[0], x, cotangent)
    (grad_got,) = torch.autograd.grad(got[0], x, cotangent)
    # overlapping windows sum several gradients, rounded in another order than torch's in bf16
    tol = dict(rtol=4e-2, atol=4e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(grad_got, grad_expected, **tol)


def test_random_samples_drawn_in_the_kernel_give_valid_windows():
    """Without ``_random_samples`` torch draws them (in the kernel, from Philox): every output is
    the value at its index, and the maximum of a window of the kernel size there."""
    x = torch.randn(2, 3, 10, 10, generator=torch.Generator().manual_seed(1))
    fn = lambda x: F.fractional_max_pool2d(x, 3, output_size=4, return_indices=True)  # noqa: E731
    values, indices = torch.compile(fn, backend="nkipy", options={"strict": True})(x)
    assert torch.equal(values, x.flatten(2).gather(2, indices.flatten(2)).view_as(values))
    pooled = F.max_pool2d(x, 3, stride=1)
    rows, cols = indices // 10, indices % 10
    for r, c, v in zip(rows.flatten(), cols.flatten(), values.flatten()):
        near = pooled[..., max(r - 2, 0) : r + 1, max(c - 2, 0) : c + 1]
        assert (near >= v).any()
