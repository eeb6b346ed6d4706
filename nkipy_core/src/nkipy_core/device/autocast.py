"""``torch.autocast("nkipy")``: the same op policy as CUDA's autocast, registered from Python.

Ops that gain from low precision (matmuls, convolutions, linear, attention, RNN cells) run in the
autocast dtype; ops that need range or accuracy (softmax, norms, losses, exp/log, reductions)
run in float32. Each kernel casts floating ``nkipy`` arguments (not float64) and redispatches
below the autocast key; every other op falls through. The device's default autocast dtype is
bfloat16, Trainium's native low-precision type.
"""

from __future__ import annotations

import torch

from nkipy_core import _torch
from nkipy_core.buffers.device_contract import NAME

LOWER_PRECISION = (
    "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d convolution prelu "
    "addmm addmv addr matmul einsum mm mv linear addbmm baddbmm bmm chain_matmul linalg_multi_dot "
    "scaled_dot_product_attention lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell"
).split()
FLOAT32 = (
    "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow softplus "
    "layer_norm group_norm norm nuclear_norm frobenius_norm cosine_similarity poisson_nll_loss "
    "cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div l1_loss smooth_l1_loss "
    "huber_loss mse_loss margin_ranking_loss multilabel_margin_loss soft_margin_loss "
    "triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist "
    "renorm logsumexp softmax log_softmax cumprod cumsum prod sum"
).split()

_KEY = _torch.DispatchKeySet(_torch.DispatchKey.AutocastPrivateUse1)  # type: ignore[attr-defined]  # not in torch's stub
_libraries: tuple[torch.library.Library, ...] | None = None


def install() -> None:
    """Register the policy (at the device's first allocation: it is ~300 registrations)."""
    global _libraries
    if _libraries is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    for names, to in ((LOWER_PRECISION, None), (FLOAT32, torch.float32)):
        for name in names:
            packet = getattr(torch.ops.aten, name, None)
            for overload in packet.overloads() if packet is not None else ():
                op = getattr(packet, overload)
                if not _torch.schema(
                    op
                ).is_mutable:  # autocast leaves out= and in-place forms alone
                    lib.impl(op, _kernel(op, to), "AutocastPrivateUse1")
    rest = torch.library.Library("_", "IMPL")
    rest.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    torch.set_autocast_dtype(NAME, torch.bfloat16)
    _libraries = (lib, rest)


def _kernel(op: _torch.OpOverload, to: torch.dtype | None):
    def kernel(*args, **kwargs):
        dtype = to or torch.get_autocast_dtype(NAME)
        with _torch.ExcludeDispatchKeyGuard(_KEY):
            return op(*_cast(args, dtype), **_cast(kwargs, dtype))

    return _torch.untraced(kernel)  # the dispatcher calls it, in compiled code too


def _cast(value, dtype: torch.dtype):
    if isinstance(value, torch.Tensor):
        castable = (
            value.device.type == NAME and value.is_floating_point() and value.dtype != torch.float64
        )
        return value.to(dtype) if castable and value.dtype != dtype else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _cast(v, dtype) for k, v in value.items()}
    return value
