"""Layouts and aliasing on the ``nkipy`` device: each case here is a failure the differential
fuzzer (``test_fuzz_device.py``) found, kept as a regression test."""

from __future__ import annotations

import pytest
import torch

OVERLAP = "refers? to a single memory location"


def _scatter(x: torch.Tensor) -> torch.Tensor:
    src = torch.ones(2, 2, device=x.device)
    return torch.as_strided_scatter(x, src, (2, 2), (1, 2))


def test_as_strided_scatter_reads_a_transposed_input_s_layout_eager_and_compiled():
    a = torch.randn(4, 6)
    expected = _scatter(a.t())
    assert torch.equal(_scatter(a.to("nkipy").t()).cpu(), expected)
    compiled = torch.compile(_scatter, backend="nkipy")
    assert torch.equal(compiled(a.to("nkipy").t()).cpu(), expected)
    assert torch.equal(compiled(a.t()), expected)


def test_as_strided_scatter_of_a_strided_input_keeps_its_storage_layout():
    """torch scatters into a clone with the input's strides (``clone_preserve_strides``), and a
    second scatter reads the first one's strides."""
    base = torch.randn(6)

    def twice(x):
        once = torch.as_strided_scatter(x, torch.ones(2, device=x.device), (2,), (2,), 0)
        return torch.as_strided_scatter(once, torch.full((2,), 2.0, device=x.device), (2,), (2,))

    assert torch.equal(twice(base.to("nkipy")[::2]).cpu(), twice(base[::2]))


def test_as_strided_scatter_of_an_offset_input():
    base = torch.randn(12)
    x, d = base[3:].view(3, 3), base.to("nkipy")[3:].view(3, 3)
    args = ((2,), (4,), 5)
    src = torch.ones(2)
    assert torch.equal(
        torch.as_strided_scatter(d, src.to("nkipy"), *args).cpu(),
        torch.as_strided_scatter(x, src, *args),
    )


@pytest.mark.parametrize("device", ["cpu", "nkipy"])
def test_writes_into_an_expanded_tensor_are_refused(device):
    x = torch.ones(1, 4, device=device).expand(3, 4)
    with pytest.raises(RuntimeError, match=OVERLAP):
        x.add_(1)
    with pytest.raises(RuntimeError, match=OVERLAP):
        x.copy_(torch.zeros(3, 4, device=device))


@pytest.mark.parametrize("device", ["cpu", "nkipy"])
def test_writes_that_partly_overlap_an_input_are_refused(device):
    x = torch.randn(3, 3, device=device)
    with pytest.raises(RuntimeError, match=OVERLAP):
        torch.mul(x.t(), x, out=x.t())
    with pytest.raises(RuntimeError, match=OVERLAP):
        x.add_(x.t())
    with pytest.raises(RuntimeError, match=OVERLAP):
        x.add_(x[0])  # every tensor plain: the device's fast path checks it too
    with pytest.raises(RuntimeError, match=OVERLAP):
        x[1:].copy_(x[:-1])
    assert torch.neg(x, out=x) is x  # the very same elements: allowed


@pytest.mark.parametrize("device", ["cpu", "nkipy"])
def test_an_out_tensor_that_is_an_input_is_not_resized(device):
    x = torch.ones(2, device=device)
    y = torch.ones(1, 4, 1, 2, device=device)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.mul(x, y, out=x)


def test_copies_between_empty_views_past_their_storage_end():
    empty = torch.zeros(2, 3, 2, 0).to("nkipy").permute(0, 3, 1, 2)
    offset = torch.zeros(4).to("nkipy").as_strided((2, 0, 3, 2), (0, 6, 2, 1), 4)
    assert empty.copy_(offset).shape == (2, 0, 3, 2)


@pytest.mark.parametrize("op", [torch.maximum, torch.minimum])
def test_maximum_and_minimum_of_booleans(op):
    a = torch.tensor([True, False, True, False])
    b = torch.tensor([True, True, False, False])
    assert torch.equal(op(a.to("nkipy"), b.to("nkipy")).cpu(), op(a, b))


def test_group_norm_with_a_strided_bias_gives_the_values_result():
    """torch's CPU kernel misreads a strided bias (its result differs from the same values
    contiguous); the device gives the values' result."""
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 6, 3), torch.randn(6), torch.randn(12)[::2]
    expected = torch.native_group_norm(x, w, b.contiguous(), 2, 6, 3, 2, 1e-5)[0]
    bias = torch.randn(12).to("nkipy")
    bias[::2] = b.to("nkipy")
    got = torch.native_group_norm(x.to("nkipy"), w.to("nkipy"), bias[::2], 2, 6, 3, 2, 1e-5)[0]
    torch.testing.assert_close(got.cpu(), expected)
