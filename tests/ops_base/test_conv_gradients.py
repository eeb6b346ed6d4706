"""Convolution gradients through ``torch.compile(backend="nkipy", options={"strict": True})``
against eager, in f64: strided, padded, dilated, grouped and depthwise, so that the input
gradient (``conv_transpose``) and the weight gradient take each of the runtime's forms
(``tests/core/test_conv_transpose.py`` checks ``conv_transpose`` itself)."""

import itertools

import pytest
import torch
import torch.nn.functional as F


@pytest.mark.parametrize(
    ("stride", "padding", "dilation", "groups"),
    list(itertools.product((1, 2), (0, 1), (1, 2), (1, 2, 4))),
)
def test_compiled_convolution_gradients_match_eager(stride, padding, dilation, groups):
    torch.manual_seed(0)
    x = torch.randn(2, 4, 9, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, 4 // groups, 3, 3, dtype=torch.float64, requires_grad=True)

    def fn(x, w):
        return F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)

    expected = torch.autograd.grad(fn(x, w).square().sum(), (x, w))
    compiled = torch.compile(fn, backend="nkipy", fullgraph=True, options={"strict": True})
    got = torch.autograd.grad(compiled(x, w).square().sum(), (x, w))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10)
