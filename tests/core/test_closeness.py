"""``assert_close_to_eager``: a half-float result may differ from eager where eager is less exact."""

import pytest
import torch
import torch.nn.functional as F

from nkipy_core.testing import assert_close_to_eager, upcast


def _conv(x, w):
    return F.conv_transpose2d(x, w)


def test_a_half_float_result_no_farther_from_float64_than_eager_passes():
    torch.manual_seed(0)
    x, w = (
        torch.randn(2, 4, 6, 6, dtype=torch.bfloat16),
        torch.randn(4, 3, 3, 3, dtype=torch.bfloat16),
    )
    exact = _conv(*upcast((x, w)))
    rounded_once = exact.bfloat16()  # what computing in float64 and rounding once gives
    eager = _conv(x, w)
    assert_close_to_eager(rounded_once, eager, rtol=1.6e-2, atol=1e-2, exact=lambda: exact)


def test_a_half_float_result_farther_than_eager_fails_and_says_where():
    exact = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    eager = exact.bfloat16()
    wrong = eager.clone()
    wrong[1] = 2.5
    with pytest.raises(
        AssertionError,
        match=r"1 of 3 element\(s\) .* at flat index 1, compiled 2.5, eager 2.0, float64 2.0",
    ):
        assert_close_to_eager(wrong, eager, rtol=1.6e-2, atol=1e-2, exact=lambda: exact)


def test_without_half_floats_it_is_assert_close():
    exact = torch.tensor([1.0, 2.0], dtype=torch.float64)
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        assert_close_to_eager(
            torch.tensor([1.0, 2.5]),
            torch.tensor([1.0, 2.0]),
            rtol=1e-5,
            atol=1e-5,
            exact=lambda: exact,
        )
