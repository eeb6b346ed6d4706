"""The ``conv`` primitive: its NumPy reference against torch's convolutions, and its emission on
XLA against the reference, for 1-3 spatial dims, strides, paddings (negative ones crop), both
dilations and groups (dense, grouped, depthwise with a channel multiplier). Both emissions run:
the one ``stablehlo.convolution`` written for neuronx-cc, and the forms the ``xla`` runtime
picks per shape (native, tap sums, window columns), each of which some case takes. The same for
``conv_transpose`` (its NumPy reference is checked against torch in
``tests/core/test_conv_transpose.py``): native, and the product with taps padded into place."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from xla_oracle import assert_same, run_reference

from nkipy_core.ir import DType, KernelBuilder, TensorType
from nkipy_runtime import xla_runtime
from nkipy_runtime.hlo_files import hlo_artifacts
from nkipy_runtime.stablehlo import emit_module

pytest.importorskip("jax", reason="the xla oracle needs the nkipy-runtime[xla] extra (jax, jaxlib)")

#: (x shape, w shape, params)
CASES = [
    ((2, 6, 9, 8), (4, 6, 3, 3), dict(stride=(2, 2), low=(1, 1), high=(1, 1))),  # dense, strided
    ((2, 6, 9, 8), (6, 1, 7, 7), dict(low=(3, 3), high=(3, 3), groups=6)),  # depthwise 7x7
    (
        (2, 6, 9, 8),
        (12, 1, 3, 3),
        dict(stride=(2, 1), low=(2, 2), high=(2, 2), rhs_dilation=(2, 2), groups=6),
    ),
    ((2, 6, 9, 8), (4, 3, 3, 2), dict(groups=2)),  # grouped, unpadded
    ((1, 3, 10), (5, 3, 4), dict(low=(2,), high=(-1,))),  # 1-D, a negative high pad crops
    ((1, 2, 5, 6, 4), (4, 2, 3, 3, 2), dict(low=(1, 1, 0), high=(1, 1, 1))),  # 3-D
    ((2, 4, 5, 5), (3, 4, 3, 3), dict(low=(1, 1), high=(2, 2), lhs_dilation=(2, 2))),  # transposed
    ((1, 2, 2, 2), (3, 2, 3, 3), dict(low=(2, 2), high=(2, 2), lhs_dilation=(2, 2))),  # small
    ((3, 2, 9, 9), (3, 2, 7, 7), dict(stride=(2, 2), low=(1, 1), high=(0, 0))),  # a weight gradient
    # grouped ones with 9 result positions: a depthwise one with a channel multiplier of 2 and
    # 81 taps, and the weight gradient of a depthwise one (two channels per group: the batch)
    ((1, 4, 12, 12), (8, 1, 9, 9), dict(stride=(2, 2), low=(1, 1), high=(0, 0), groups=4)),
    ((1, 8, 10, 10), (4, 2, 7, 7), dict(stride=(2, 2), low=(1, 1), high=(0, 0), groups=4)),
]


def _full(x_shape, params):
    spatial = len(x_shape) - 2
    ones = (1,) * spatial
    return {
        "stride": params.get("stride", ones),
        "low": params.get("low", (0,) * spatial),
        "high": params.get("high", (0,) * spatial),
        "lhs_dilation": params.get("lhs_dilation", ones),
        "rhs_dilation": params.get("rhs_dilation", ones),
        "groups": params.get("groups", 1),
    }


#: (x shape, w shape, params) of ``conv_transpose``: ``w`` is the forward convolution's weight
TRANSPOSE_CASES = [
    ((2, 4, 8, 8), (4, 3, 3, 3), dict(stride=(2, 2), low=(1, 1), high=(0, 0))),  # dense, 16x16
    ((2, 8, 2, 2), (8, 6, 3, 3), dict(low=(1, 1), high=(1, 1))),  # a small image, many channels
    ((2, 6, 3, 3), (6, 2, 3, 3), dict(stride=(2, 2), low=(1, 1), high=(0, 0), groups=3)),
    ((1, 3, 4), (3, 2, 4), dict(stride=(3,), low=(2,), high=(-2,), rhs_dilation=(2,))),
    ((1, 2, 3), (2, 2, 3), dict(stride=(1,), low=(4,), high=(-3,))),  # two taps fall outside
    ((2, 6, 3, 3), (6, 2, 3, 3), dict(stride=(2, 2), low=(1, 1), high=(0, 0), groups=6)),  # dw
]


def _full_transpose(x_shape, params):
    ones = (1,) * (len(x_shape) - 2)
    return {
        "stride": params.get("stride", ones),
        "low": params["low"],
        "high": params["high"],
        "rhs_dilation": params.get("rhs_dilation", ones),
        "groups": params.get("groups", 1),
    }


def _kernel(dtype: DType, prim: str = "conv"):
    cases, full = (CASES, _full) if prim == "conv" else (TRANSPOSE_CASES, _full_transpose)
    kb = KernelBuilder(prim)
    outputs = [
        kb.emit(
            prim, [kb.param(TensorType(xs, dtype)), kb.param(TensorType(ws, dtype))], full(xs, p)
        )
        for xs, ws, p in cases
    ]
    return kb.finish(outputs)


def _inputs(dtype: DType, prim: str = "conv") -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    cases = CASES if prim == "conv" else TRANSPOSE_CASES
    return [rng.standard_normal(s).astype(dtype.numpy) for xs, ws, _ in cases for s in (xs, ws)]


def _torch_conv(x: np.ndarray, w: np.ndarray, params: dict) -> np.ndarray:
    """torch's result for a case: a transposed convolution for ``lhs_dilation``, else
    ``conv*d`` on the input padded (or cropped) as the case says."""
    p = _full(x.shape, params)
    X, W = torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64)
    spatial = x.ndim - 2
    if p["lhs_dilation"] != (1,) * spatial:
        # conv(spread x, w) == conv_transpose(x, flipped w with in/out swapped)
        flipped = W.flip(list(range(2, 2 + spatial))).transpose(0, 1)
        k = w.shape[2:]
        padding = [kk - 1 - lo for kk, lo in zip(k, p["low"])]
        extra = [hi - lo for lo, hi in zip(p["low"], p["high"])]
        transpose = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[spatial]
        out = transpose(X, flipped, stride=p["lhs_dilation"], padding=padding, output_padding=extra)
        return out.numpy()
    pads = [v for lo, hi in reversed(list(zip(p["low"], p["high"]))) for v in (lo, hi)]
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]
    out = conv(
        F.pad(X, pads), W, stride=p["stride"], dilation=p["rhs_dilation"], groups=p["groups"]
    )
    return out.numpy()


def test_numpy_reference_is_torchs_convolution():
    got = run_reference(_kernel(DType.f64), _inputs(DType.f64))
    inputs = _inputs(DType.f64)
    for i, (_, _, params) in enumerate(CASES):
        want = _torch_conv(inputs[2 * i], inputs[2 * i + 1], params)
        assert got[i].shape == want.shape, CASES[i]
        np.testing.assert_allclose(got[i], want, rtol=1e-12, atol=1e-12, err_msg=str(CASES[i]))


def test_the_xla_runtime_takes_every_form():
    text = emit_module(_kernel(DType.f32), xla_cpu=True)
    assert text.count("stablehlo.convolution") == 2  # the dense, large-result cases
    assert "stablehlo.dot_general" in text and "stablehlo.multiply" in text
    assert emit_module(_kernel(DType.f32)).count("stablehlo.convolution") == len(CASES)
    # weight gradients (4 and 9 result positions, 49 or 81 taps): a slice per position, not tap
    for (xs, ws, params), positions in zip(CASES[-3:], (4, 9, 9)):
        kb = KernelBuilder("weight_grad")
        x, w = kb.param(TensorType(xs, DType.f32)), kb.param(TensorType(ws, DType.f32))
        fields = emit_module(kb.finish([kb.emit("conv", [x, w], _full(xs, params))]), xla_cpu=True)
        assert fields.count("stablehlo.slice") == positions
    transposed = emit_module(_kernel(DType.f32, "conv_transpose"), xla_cpu=True)
    assert transposed.count("stablehlo.convolution") == 1  # the dense case
    assert transposed.count("stablehlo.dot_general") == len(TRANSPOSE_CASES) - 2  # dense, dw
    native = emit_module(_kernel(DType.f32, "conv_transpose"))
    assert native.count("stablehlo.convolution") == native.count("stablehlo.reverse") == 6


@pytest.mark.parametrize("native", [True, False], ids=["neuron-form", "xla-cpu-forms"])
@pytest.mark.parametrize("dtype", [DType.f32, DType.f64, DType.bf16, DType.f16], ids=str)
def test_convolution_on_xla_matches_the_reference(dtype, native, monkeypatch):
    if native:
        monkeypatch.setattr(
            xla_runtime, "hlo_artifacts", lambda k, **_: hlo_artifacts(k, xla_cpu=False)
        )
    eps = (
        float(ml_dtypes.finfo(dtype.numpy).eps)
        if dtype.is_half
        else float(np.finfo(dtype.numpy).eps)
    )
    for prim in ("conv", "conv_transpose"):
        assert_same(
            _kernel(dtype, prim),
            _inputs(dtype, prim),
            rtol=(1 if dtype.is_half else 64) * eps,
            atol=64 * eps,
        )


def test_a_depthwise_convolution_read_by_two_reductions_is_summed_once():
    # a LayerNorm over channels after a depthwise conv, as in ConvNeXt: without the barrier XLA
    # fused the tap sum into the mean's, the variance's and the output's loops alike (12x slower)
    kb = KernelBuilder("dw_norm")
    x = kb.param(TensorType((2, 8, 6, 6), DType.f32))
    w = kb.param(TensorType((8, 1, 7, 7), DType.f32))
    y = kb.emit("conv", [x, w], _full((2, 8, 6, 6), dict(low=(3, 3), high=(3, 3), groups=8)))
    mean = kb.emit("reduce", [y], {"kind": "sum", "axes": (1,), "keepdims": True})
    centred = kb.emit("sub", [y, kb.emit("broadcast", [mean], {"shape": (2, 8, 6, 6)})], {})
    square = kb.emit("mul", [centred, centred], {})
    kernel = kb.finish(
        [kb.emit("reduce", [square], {"kind": "sum", "axes": (1,), "keepdims": True}), centred]
    )
    assert "stablehlo.optimization_barrier" in emit_module(kernel, xla_cpu=True)
    rng = np.random.default_rng(0)
    inputs = [
        rng.standard_normal((2, 8, 6, 6)).astype(np.float32),
        rng.standard_normal((8, 1, 7, 7)).astype(np.float32),
    ]
    assert_same(kernel, inputs, rtol=1e-5, atol=1e-5)
    executable = xla_runtime.XlaRuntime().compile(kernel, None)
    optimized = executable.compiled.hlo_modules()[0].to_string()
    assert "opt-barrier" in optimized  # XLA kept it: the taps are summed before either reduction
