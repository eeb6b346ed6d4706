"""Masked elements gathered to a static size: ``nonzero_static`` and the backward of
``masked_scatter``, compiled against eager (fewer, as many and more true elements than the
output holds; NaN counts as nonzero)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import nkipy_core


def compiled(fn):
    return torch.compile(fn, backend="nkipy", options={"strict": True})


@pytest.mark.parametrize("size", [0, 3, 7, 20])
@pytest.mark.parametrize("shape", [(13,), (3, 5), (2, 3, 4), ()])
def test_nonzero_static_matches_eager(shape, size):
    g = torch.Generator().manual_seed(len(shape) + size)
    x = torch.randint(0, 3, shape, generator=g).float()
    if x.numel() > 2:
        x.view(-1)[1] = math.nan
    fn = compiled(lambda v: torch.nonzero_static(v, size=size, fill_value=-5))
    assert torch.equal(fn(x), torch.nonzero_static(x, size=size, fill_value=-5))


def test_nonzero_static_of_a_bool_mask_with_the_default_fill():
    mask = torch.tensor([[True, False, True], [False, False, True]])
    got = compiled(lambda m: torch.nonzero_static(m, size=5))(mask)
    assert torch.equal(got, torch.nonzero_static(mask, size=5))
    assert got.dtype == torch.int64


@pytest.mark.parametrize("extra", [0, 4])
def test_masked_scatter_backward_gives_the_source_its_gradient(extra):
    g = torch.Generator().manual_seed(extra)
    x = torch.randn(4, 6, generator=g, requires_grad=True)
    mask = torch.rand(6, generator=g) > 0.5  # broadcast over the rows
    source = torch.randn(int(mask.sum()) * 4 + extra, generator=g, requires_grad=True)
    upstream = torch.randn(4, 6, generator=g)

    def fn(a, s):
        return a.masked_scatter(mask, s) * 2

    want = torch.autograd.grad(fn(x, source), (x, source), upstream)
    with warnings.catch_warnings():
        warnings.simplefilter("error", nkipy_core.FallbackWarning)
        got = torch.autograd.grad(compiled(fn)(x, source), (x, source), upstream)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
