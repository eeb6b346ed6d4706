"""The chunked fused linear cross-entropy and complex sigmoid (``silu`` of complex tensors),
compiled strictly and compared with eager, forward and backward."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - torch's name
from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

from nkipy_core import Unsupported
from nkipy_ops_base import lowerings_linear_cross_entropy

STRICT = {"strict": True}


def _inputs(dtype, scale=1.0):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(6, 5, generator=g) * scale).to(dtype).requires_grad_()
    w = torch.randn(7, 5, generator=g).to(dtype).requires_grad_()
    b = torch.randn(7, generator=g).to(dtype).requires_grad_()
    return x, w, b


def _loss(reduction, ignore_index=-100, class_weight=None):
    options = LinearCrossEntropyOptions(batch_chunk_size=4, allow_retain_graph=True)

    def fn(x, w, b, target):
        return F.linear_cross_entropy(
            x,
            w,
            target,
            linear_bias=b,
            weight=class_weight,
            reduction=reduction,
            ignore_index=ignore_index,
            options=options,
        )

    return fn


def _compare(fn, inputs, target, tol):
    compiled = torch.compile(fn, backend="nkipy", options=STRICT)
    got, expected = compiled(*inputs, target), fn(*inputs, target)
    torch.testing.assert_close(got, expected, **tol, equal_nan=True)
    upstream = torch.linspace(0.5, 1.5, got.numel()).reshape(got.shape).to(got.dtype)
    for g, e in zip(
        torch.autograd.grad(got, inputs, upstream), torch.autograd.grad(expected, inputs, upstream)
    ):
        torch.testing.assert_close(g, e, **tol, equal_nan=True)


F32 = {"rtol": 1e-5, "atol": 1e-5}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_matches_eager_with_ignored_rows_and_class_weights(reduction):
    target = torch.tensor([0, 3, -100, 6, 2, 3])
    class_weight = torch.linspace(0.5, 2.0, 7)
    _compare(_loss(reduction, class_weight=class_weight), _inputs(torch.float32), target, F32)


def test_large_logits_do_not_overflow():
    """The row maximum is subtracted before ``exp``: logits of 1e4 stay finite."""
    _compare(
        _loss("mean"),
        _inputs(torch.float32, scale=3e3),
        torch.tensor([1, 2, 3, 4, 5, 6]),
        {
            "rtol": 1e-4,
            "atol": 1e-3,
        },
    )


def test_every_row_ignored_is_nan_for_mean():
    """No weight at all: the mean is 0/0, NaN (loss and gradients), as in torch."""
    _compare(_loss("mean", ignore_index=2), _inputs(torch.float32), torch.full((6,), 2), F32)


def test_bfloat16_accumulates_in_float32():
    _compare(
        _loss("sum"),
        _inputs(torch.bfloat16),
        torch.tensor([0, 1, 2, 3, 4, 5]),
        {
            "rtol": 2e-2,
            "atol": 2e-2,
        },
    )


def test_label_smoothing_is_declined():
    x, w, b = (v.detach() for v in _inputs(torch.float32))
    target = torch.zeros(6, dtype=torch.int64)
    args = (x, w, target, b, None, "mean", -100, 0.1, 4, "accurate", torch.float32, True)
    with pytest.raises(Unsupported, match="label smoothing"):
        lowerings_linear_cross_entropy.linear_cross_entropy_chunked(None, *args, True, True, True)


def test_complex_silu_matches_eager_at_edge_values():
    """``x · sigmoid(x)``: a large negative real part makes ``exp(-x)`` infinite, a zero; NaN
    and infinite parts propagate as in ATen."""
    inf, nan = math.inf, math.nan
    values = [0.5 + 1j, -2 + 3j, 0j, -100 + 0.3j, 30 - 2j, 1e3 + 1e3j, complex(nan, 1), inf, -inf]
    x = torch.tensor(values, dtype=torch.complex64)
    compiled = torch.compile(F.silu, backend="nkipy", options=STRICT)
    torch.testing.assert_close(compiled(x), F.silu(x), equal_nan=True)


def test_complex_sigmoid_backward_matches_eager():
    x = torch.tensor([0.5 + 1j, -2 + 3j, 0j, 4 - 1j], dtype=torch.complex64, requires_grad=True)
    compiled = torch.compile(torch.sigmoid, backend="nkipy", options=STRICT)
    upstream = torch.tensor([1 + 1j, -0.5j, 2, 0.3 - 0.2j], dtype=torch.complex64)
    (got,) = torch.autograd.grad(compiled(x), x, upstream)
    (expected,) = torch.autograd.grad(torch.sigmoid(x), x, upstream)
    torch.testing.assert_close(got, expected)
