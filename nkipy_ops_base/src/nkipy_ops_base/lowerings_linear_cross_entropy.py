"""The fused linear cross-entropy of ``F.linear_cross_entropy`` with batch chunking: torch's
custom ops ``torch_nn::_linear_cross_entropy_batch_chunked`` (mean or sum, returning the loss
with its gradients, which its backward scales by the upstream gradient) and
``..._no_reduction`` (the per-sample loss; its backward is traced into ATen ops).

Torch loops over batch chunks to bound the memory of the ``(N, classes)`` logits; a kernel is
one dataflow graph, so the rule computes every chunk at once: ``logits = X Wᵀ + b`` shifted by
their row maximum, the loss ``w[t] · (log Σ exp - logit[t])`` and, for the reduced op, the
gradients from ``G = c · (softmax - onehot(t))`` (``c`` the row's class weight, over the summed
weights for ``mean``): ``∂X = G W``, ``∂W = Gᵀ X``, ``∂b = Σ G``. Rows whose target is
``ignore_index`` weigh 0. Everything is computed in the input's opmath (f32 for half floats,
as torch accumulates them) and rounded once; torch's chunking only changes how the sums are
ordered. Label smoothing is declined, as torch's op refuses it.
"""

from __future__ import annotations

import torch
import torch.nn.modules.linear_cross_entropy  # noqa: F401 - registers the torch_nn ops

from nkipy_core import knp

from .conventions import require
from .opmath import compute_dtype
from .rules import RULES

_OPS = torch.ops.torch_nn


def _rows(ctx, x, weight, target, bias, class_weight, ignore_index):
    """``(shifted logits, one-hot targets, row weights, per-row loss)`` in the compute dtype."""
    require(x.ndim == 2 and weight.ndim == 2, "linear_cross_entropy: 2-d input and weight only")
    dtype = compute_dtype(knp.dtype_of(x))
    logits = knp.matmul(knp.astype(x, dtype), knp.transpose(knp.astype(weight, dtype), (1, 0)))
    if bias is not None:
        logits = knp.add(logits, knp.astype(bias, dtype))
    shifted = knp.subtract(logits, knp.max(logits, 1, keepdims=True))
    ignored = knp.equal(target, ignore_index)
    target = knp.where(ignored, 0, target)
    classes = knp.arange(weight.shape[0], dtype=knp.dtype_of(target))
    onehot = knp.equal(knp.expand_dims(target, 1), knp.expand_dims(classes, 0))
    row_weight = (
        knp.astype(knp.logical_not(ignored), dtype)
        if class_weight is None
        else knp.where(ignored, 0, knp.take(knp.astype(class_weight, dtype), target, 0))
    )
    target_logit = knp.sum(knp.where(onehot, shifted, 0), 1)
    log_denominator = knp.log(knp.sum(knp.exp(shifted), 1))
    return shifted, onehot, row_weight, knp.subtract(log_denominator, target_logit)


@RULES.register(_OPS._linear_cross_entropy_batch_chunked.default)
def linear_cross_entropy_chunked(
    ctx,
    x,
    weight,
    target,
    bias,
    class_weight,
    reduction,
    ignore_index,
    label_smoothing,
    batch_chunk_size,
    acc_policy,
    acc_dtype,
    allow_retain_graph,
    compute_input_grad,
    compute_weight_grad,
    compute_bias_grad,
):
    """``(loss, ∂X, ∂W, ∂b)``; a gradient not asked for is the op's empty placeholder."""
    require(label_smoothing == 0, "linear_cross_entropy: label smoothing (torch refuses it)")
    require(reduction in ("mean", "sum"), f"linear_cross_entropy: reduction {reduction!r}")
    shifted, onehot, row_weight, nll = _rows(
        ctx, x, weight, target, bias, class_weight, ignore_index
    )
    dtype = knp.dtype_of(shifted)
    loss = knp.sum(knp.multiply(row_weight, nll))
    if reduction == "mean":  # no weight at all (every row ignored) is 0/0: NaN, as in torch
        total = knp.sum(row_weight)
        loss, row_weight = knp.divide(loss, total), knp.divide(row_weight, total)
    exp = knp.exp(shifted)
    softmax = knp.divide(exp, knp.sum(exp, 1, keepdims=True))
    residual = knp.subtract(softmax, knp.astype(onehot, dtype))
    grad = knp.multiply(residual, knp.expand_dims(row_weight, 1))
    gradients = (
        (compute_input_grad, lambda: knp.matmul(grad, knp.astype(weight, dtype))),
        (
            compute_weight_grad,
            lambda: knp.matmul(knp.transpose(grad, (1, 0)), knp.astype(x, dtype)),
        ),
        (compute_bias_grad, lambda: knp.sum(grad, 0)),
    )
    results = [loss]
    for (wanted, gradient), out in zip(gradients, ctx.out[1:]):
        results.append(gradient() if wanted else knp.zeros(out.shape, dtype))
    return tuple(knp.astype(r, out.dtype) for r, out in zip(results, ctx.out))


@RULES.register(_OPS._linear_cross_entropy_batch_chunked_no_reduction.default)
def linear_cross_entropy_chunked_none(
    ctx, x, weight, target, bias, class_weight, ignore_index, batch_chunk_size, *acc
):
    """The per-row loss ``w[t] · (log Σ exp - logit[t])`` (0 for an ignored row)."""
    _, _, row_weight, nll = _rows(ctx, x, weight, target, bias, class_weight, ignore_index)
    return knp.astype(knp.multiply(row_weight, nll), ctx.out_dtype)
