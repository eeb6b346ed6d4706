"""The ``conv_transpose`` primitive's NumPy code (the ``cpu`` runtime's) against torch.

``conv_transpose`` is the adjoint of ``conv`` in its input: a convolution of ``x`` spread by the
stride with the reversed weight, in and out channels swapped within each group. Each case runs
the kernel's generated code and checks it against that convolution, computed by torch, for
strides, dilations, groups, one and two spatial dims, and paddings that crop or that reach past
every window (``output_padding``).
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from ir_trace import trace

from nkipy_core import knp
from nkipy_core.ir import DType, TensorType, codegen

RNG = np.random.default_rng(0)


def _reference(x, w, stride, low, high, dilation, groups):
    """torch's convolution of ``x`` spread by ``stride`` and padded so that the reversed,
    channel-swapped ``w`` sweeps every position a window of the forward convolution touched."""
    spatial = x.ndim - 2
    X, W = torch.from_numpy(x), torch.from_numpy(w)
    sizes = [(n - 1) * s + 1 for n, s in zip(x.shape[2:], stride)]
    spread = X.new_zeros(x.shape[:2] + tuple(sizes))
    spread[(slice(None),) * 2 + tuple(slice(None, None, s) for s in stride)] = X
    o, cg, kernel = w.shape[0], w.shape[1], w.shape[2:]
    swapped = (
        W.flip(list(range(2, 2 + spatial)))
        .reshape(groups, o // groups, cg, *kernel)
        .transpose(1, 2)
        .reshape(groups * cg, o // groups, *kernel)
    )
    reach = [(k - 1) * d for k, d in zip(kernel, dilation)]
    pads = [(r - lo, r - hi) for r, lo, hi in zip(reach, low, high)]
    flat = [v for lo, hi in reversed(pads) for v in (lo, hi)]
    conv = {1: F.conv1d, 2: F.conv2d}[spatial]
    return conv(F.pad(spread, flat), swapped, dilation=dilation, groups=groups).numpy()


#: (spatial dims, groups, x channels, result channels, kernel, stride, dilation, low, high)
CASES = [
    (2, 1, 4, 3, 3, 1, 1, 1, 1),  # a stride-1 input gradient
    (2, 1, 4, 3, 3, 2, 1, 1, 0),  # a stride-2 input gradient: one more row (output_padding)
    (2, 2, 4, 6, 3, 2, 2, 3, 4),  # grouped, dilated
    (1, 1, 3, 5, 4, 3, 1, 1, -2),  # a negative high pad: positions past every window
    (1, 1, 2, 2, 1, 2, 1, 0, 0),  # 1x1, strided: every other position is zero
    (2, 1, 3, 2, 3, 1, 1, -1, 3),  # a negative low pad
    (1, 3, 3, 6, 2, 1, 1, 0, 0),  # one input channel per group
    (2, 4, 4, 8, 3, 2, 1, 1, 0),  # depthwise, a channel multiplier of 2, strided
    (2, 3, 3, 3, 3, 2, 2, 2, -1),  # depthwise, strided, dilated, cropped
]


@pytest.mark.parametrize(
    ("spatial", "groups", "o", "c", "k", "stride", "dil", "low", "high"), CASES
)
def test_conv_transpose_is_the_convolution_with_the_reversed_weight(
    spatial, groups, o, c, k, stride, dil, low, high
):
    x_type = TensorType((2, o) + (5,) * spatial, DType.f64)
    w_type = TensorType((o, c // groups) + (k,) * spatial, DType.f64)
    params = {
        "stride": (stride,) * spatial,
        "padding": [(low, high)] * spatial,
        "rhs_dilation": (dil,) * spatial,
        "groups": groups,
    }
    kernel = trace(lambda x, w: knp.conv_transpose(x, w, **params), x_type, w_type)
    x, w = (RNG.standard_normal(t.shape) for t in (x_type, w_type))
    (got,) = codegen.load(codegen.generate(kernel))(x, w)
    want = _reference(
        x, w, (stride,) * spatial, (low,) * spatial, (high,) * spatial, (dil,) * spatial, groups
    )
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conv_transpose_of_an_empty_input_is_zeros():
    """No input position, so no product: the extent of a forward input with no full window."""
    x = np.zeros((2, 4, 0, 3))
    w = RNG.standard_normal((4, 3, 2, 2))
    y = knp.conv_transpose(x, w, padding=[(0, 0), (0, 0)])
    assert y.shape == (2, 3, 1, 4)
    assert not y.any()


def test_a_padding_that_crops_past_the_input_is_a_type_error():
    with pytest.raises(Exception, match="crops past"):
        knp.conv_transpose(np.zeros((1, 2, 2)), np.zeros((2, 1, 3)), padding=[(3, 2)])
