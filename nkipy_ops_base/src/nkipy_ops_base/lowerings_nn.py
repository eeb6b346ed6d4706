"""Neural-network ops: softmax family, activations, normalisations (layer and group norm with
their backward, batch norm) and attention (grouped-query too), forward and backward.

Each is one ATen op that torch computes in a single kernel, so each rule computes in opmath
and rounds once. Fused attention (``_scaled_dot_product_flash_attention_for_cpu`` and its
backward) is lowered here rather than decomposed: its decomposition returns the attention
probabilities where the op returns the log-sum-exp, which the backward op would then misread.
"""

from __future__ import annotations

import math

import torch

from nkipy_core import knp

from .conventions import axes, require
from .opmath import compute_dtype, opmath, upcast
from .rules import RULES

aten = torch.ops.aten


# -- softmax -----------------------------------------------------------------------------------


def _log_softmax(x, axis):
    shifted = knp.subtract(x, knp.max(x, axis, keepdims=True))
    return knp.subtract(shifted, knp.log(knp.sum(knp.exp(shifted), axis, keepdims=True)))


def _softmax(x, axis):
    e = knp.exp(knp.subtract(x, knp.max(x, axis, keepdims=True)))
    return knp.divide(e, knp.sum(e, axis, keepdims=True))


@RULES.register(aten._softmax.default)
def softmax(ctx, x, dim, half_to_float):
    return opmath(ctx.out_dtype, lambda v: _softmax(v, axes(dim, v.ndim)), x)


@RULES.register(aten._log_softmax.default)
def log_softmax(ctx, x, dim, half_to_float):
    return opmath(ctx.out_dtype, lambda v: _log_softmax(v, axes(dim, v.ndim)), x)


@RULES.register(aten._softmax_backward_data.default)
def softmax_backward(ctx, grad_output, output, dim, input_dtype):
    def fn(g, y):
        gy = knp.multiply(g, y)
        return knp.subtract(gy, knp.multiply(y, knp.sum(gy, axes(dim, y.ndim), keepdims=True)))

    return opmath(ctx.out_dtype, fn, grad_output, output)


@RULES.register(aten._log_softmax_backward_data.default)
def log_softmax_backward(ctx, grad_output, output, dim, input_dtype):
    def fn(g, y):
        return knp.subtract(
            g, knp.multiply(knp.exp(y), knp.sum(g, axes(dim, y.ndim), keepdims=True))
        )

    return opmath(ctx.out_dtype, fn, grad_output, output)


# -- activations -------------------------------------------------------------------------------


@RULES.register(aten.relu.default)
def relu(ctx, x):
    return opmath(ctx.out_dtype, lambda v: knp.maximum(v, 0), x)


@RULES.register(aten.hardtanh.default)
def hardtanh(ctx, x, min_val=-1, max_val=1):
    return opmath(ctx.out_dtype, lambda v: knp.minimum(knp.maximum(v, min_val), max_val), x)


@RULES.register(aten.leaky_relu.default)
def leaky_relu(ctx, x, negative_slope=0.01):
    return opmath(
        ctx.out_dtype, lambda v: knp.where(knp.greater(v, 0), v, knp.multiply(v, negative_slope)), x
    )


@RULES.register(aten.elu.default)
def elu(ctx, x, alpha=1, scale=1, input_scale=1):
    def fn(v):
        negative = knp.multiply(knp.expm1(knp.multiply(v, input_scale)), alpha * scale)
        return knp.where(knp.less_equal(v, 0), negative, knp.multiply(v, scale))

    return opmath(ctx.out_dtype, fn, x)


@RULES.register(aten.gelu.default)
def gelu(ctx, x, *, approximate="none"):
    def fn(v):
        if approximate == "tanh":
            inner = knp.multiply(
                knp.add(v, knp.multiply(knp.power(v, 3), 0.044715)), math.sqrt(2 / math.pi)
            )
            cdf = knp.multiply(knp.add(knp.tanh(inner), 1), 0.5)
        else:
            cdf = knp.multiply(knp.add(knp.erf(knp.multiply(v, math.sqrt(0.5))), 1), 0.5)
        return knp.multiply(v, cdf)

    return opmath(ctx.out_dtype, fn, x)


# -- normalisation -----------------------------------------------------------------------------


def _moments(x, reduced):
    """Mean and biased variance over ``reduced`` (kept as size-1 dims), two-pass."""
    mean = knp.mean(x, reduced, keepdims=True)
    centered = knp.subtract(x, mean)
    return mean, knp.mean(knp.multiply(centered, centered), reduced, keepdims=True)


def _affine(y, weight, bias, shape):
    """``y * weight + bias`` with both (either may be ``None``) viewed as ``shape``."""
    if weight is not None:
        y = knp.multiply(y, knp.reshape(weight, shape))
    if bias is not None:
        y = knp.add(y, knp.reshape(bias, shape))
    return y


@RULES.register(aten.native_layer_norm.default)
def native_layer_norm(ctx, x, normalized_shape, weight, bias, eps):
    out, mean_t, rstd_t = ctx.out
    compute = compute_dtype(out.dtype)
    xs = upcast(x, out.dtype)
    reduced = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean, var = _moments(xs, reduced)
    rstd = knp.rsqrt(knp.add(var, eps))
    xhat = knp.multiply(knp.subtract(xs, mean), rstd)
    y = _affine(xhat, upcast(weight, compute), upcast(bias, compute), tuple(normalized_shape))
    return knp.astype(y, out.dtype), knp.astype(mean, mean_t.dtype), knp.astype(rstd, rstd_t.dtype)


@RULES.register(aten.native_group_norm.default)
def native_group_norm(ctx, x, weight, bias, N, C, HxW, group, eps):  # noqa: N803 - ATen's names
    out, mean_t, rstd_t = ctx.out
    compute = compute_dtype(out.dtype)
    grouped = knp.reshape(upcast(x, out.dtype), (N, group, (C // group) * HxW))
    mean, var = _moments(grouped, (2,))
    rstd = knp.rsqrt(knp.add(var, eps))
    y = knp.reshape(knp.multiply(knp.subtract(grouped, mean), rstd), x.shape)
    y = _affine(y, upcast(weight, compute), upcast(bias, compute), (1, C) + (1,) * (x.ndim - 2))
    stats = (N, group)
    mean, rstd = knp.reshape(mean, stats), knp.reshape(rstd, stats)
    return knp.astype(y, out.dtype), knp.astype(mean, mean_t.dtype), knp.astype(rstd, rstd_t.dtype)


def _normalized_grad(g, xhat, rstd, reduced):
    """Gradient through ``xhat = (x - mean) · rstd`` with the statistics over ``reduced``:
    ``rstd · (g - mean(g) - xhat · mean(g · xhat))``."""
    mean_g = knp.mean(g, reduced, keepdims=True)
    mean_gx = knp.mean(knp.multiply(g, xhat), reduced, keepdims=True)
    return knp.multiply(rstd, knp.subtract(knp.subtract(g, mean_g), knp.multiply(xhat, mean_gx)))


def _norm_backward(ctx, grad_out, x, mean, rstd, weight, reduced, affine_shape, output_mask):
    """``(grad_input, grad_weight, grad_bias)`` of ``xhat · weight + bias``, where ``x``, ``mean``
    and ``rstd`` are already shaped so that statistics broadcast over ``reduced`` and the affine
    parameters over every other axis (viewed as ``affine_shape``)."""
    compute = compute_dtype(knp.dtype_of(grad_out))
    g, xs = knp.astype(grad_out, compute), knp.astype(x, compute)
    xhat = knp.multiply(knp.subtract(xs, knp.astype(mean, compute)), knp.astype(rstd, compute))
    param_axes = tuple(a for a in range(xs.ndim) if affine_shape[a] == 1)
    grads = [None, None, None]
    if output_mask[0]:
        gw = (
            g
            if weight is None
            else knp.multiply(g, knp.reshape(knp.astype(weight, compute), affine_shape))
        )
        grads[0] = _normalized_grad(gw, xhat, knp.astype(rstd, compute), reduced)
    if output_mask[1]:
        grads[1] = knp.sum(knp.multiply(g, xhat), param_axes)
    if output_mask[2]:
        grads[2] = knp.sum(g, param_axes)
    return [v if v is None else knp.astype(v, t.dtype) for v, t in zip(grads, ctx.out)]


@RULES.register(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(
    ctx, grad_out, x, normalized_shape, mean, rstd, weight, bias, output_mask
):
    batch = x.ndim - len(normalized_shape)
    reduced = tuple(range(batch, x.ndim))
    affine_shape = (1,) * batch + tuple(normalized_shape)
    grads = _norm_backward(ctx, grad_out, x, mean, rstd, weight, reduced, affine_shape, output_mask)
    return tuple(v if v is None else knp.reshape(v, t.shape) for v, t in zip(grads, ctx.out))


@RULES.register(aten.native_group_norm_backward.default)
def native_group_norm_backward(ctx, grad_out, x, mean, rstd, weight, N, C, HxW, group, output_mask):  # noqa: N803
    """Viewed as ``(N, group, C/group, HxW)``: statistics per ``(N, group)``, parameters per channel."""
    grouped = (N, group, C // group, HxW)
    stats = (N, group, 1, 1)
    grads = _norm_backward(
        ctx,
        knp.reshape(grad_out, grouped),
        knp.reshape(x, grouped),
        knp.reshape(mean, stats),
        knp.reshape(rstd, stats),
        weight,
        (2, 3),
        (1, group, C // group, 1),
        output_mask,
    )
    return tuple(v if v is None else knp.reshape(v, t.shape) for v, t in zip(grads, ctx.out))


def _batch_norm(ctx, x, weight, bias, mean, var, eps):
    """Normalise over every dim but 1 with per-channel ``mean``/``var`` (shape ``(C,)``)."""
    dtype = ctx.out[0].dtype
    channel = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    rstd = knp.rsqrt(knp.add(var, eps))
    y = knp.multiply(
        knp.subtract(upcast(x, dtype), knp.reshape(mean, channel)), knp.reshape(rstd, channel)
    )
    compute = compute_dtype(dtype)
    return knp.astype(
        _affine(y, upcast(weight, compute), upcast(bias, compute), channel), dtype
    ), rstd


@RULES.register(aten._native_batch_norm_legit.default)
def batch_norm_legit(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Evaluation only: in training this op updates the running statistics in place (functional
    graphs hold ``_native_batch_norm_legit_functional`` instead)."""
    require(not training, "batch norm training that updates running statistics in place")
    return batch_norm_inference(ctx, x, weight, bias, running_mean, running_var, momentum, eps)


@RULES.register(aten._native_batch_norm_legit_no_training.default)
def batch_norm_inference(ctx, x, weight, bias, running_mean, running_var, momentum, eps):
    """The saved statistics are the running ones, or empty where the node says so (torch's CPU
    kernel returns empty tensors, its meta function per-channel ones)."""
    compute = compute_dtype(ctx.out[0].dtype)
    mean, var = upcast(running_mean, compute), upcast(running_var, compute)
    y, rstd = _batch_norm(ctx, x, weight, bias, mean, var, eps)
    saved = [
        knp.astype(s, t.dtype) if t.shape == s.shape else knp.zeros(t.shape, t.dtype)
        for s, t in zip((mean, rstd), ctx.out[1:])
    ]
    return (y, *saved)


def _batch_stats(ctx, x):
    xs = upcast(x, ctx.out[0].dtype)
    reduced = (0, *range(2, x.ndim))
    mean, var = _moments(xs, reduced)
    return knp.reshape(mean, (x.shape[1],)), knp.reshape(var, (x.shape[1],))


@RULES.register(aten._native_batch_norm_legit.no_stats)
def batch_norm_training(ctx, x, weight, bias, training, momentum, eps):
    require(training, "batch norm without running stats needs training=True")
    mean, var = _batch_stats(ctx, x)
    y, rstd = _batch_norm(ctx, x, weight, bias, mean, var, eps)
    return y, knp.astype(mean, ctx.out[1].dtype), knp.astype(rstd, ctx.out[2].dtype)


@RULES.register(aten._native_batch_norm_legit_functional.default)
def batch_norm_functional(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Batch norm that also returns the running statistics: updated from the batch (unbiased
    variance) in training, passed through unchanged in evaluation."""
    if not training:
        y, *saved = batch_norm_inference(
            ctx, x, weight, bias, running_mean, running_var, momentum, eps
        )
        running = (knp.astype(r, t.dtype) for r, t in zip((running_mean, running_var), ctx.out[3:]))
        return (y, *saved, *running)
    return _batch_norm_update(ctx, x, weight, bias, running_mean, running_var, momentum, eps)


def _batch_norm_update(ctx, x, weight, bias, running_mean, running_var, momentum, eps):
    """Training batch norm: the result, the batch mean and ``rstd``, and the running statistics
    updated from the batch (unbiased variance), typed as the node's first, second, third and
    last two results."""
    mean, var = _batch_stats(ctx, x)
    y, rstd = _batch_norm(ctx, x, weight, bias, mean, var, eps)
    n = x.size // x.shape[1]
    stat = compute_dtype(ctx.out[-1].dtype)
    unbiased = knp.multiply(var, n / max(n - 1, 1))
    new_mean, new_var = (
        knp.add(knp.multiply(upcast(running, stat), 1 - momentum), knp.multiply(batch, momentum))
        for running, batch in ((running_mean, mean), (running_var, unbiased))
    )
    types = (*ctx.out[1:3], *ctx.out[-2:])
    return (y, *(knp.astype(v, t.dtype) for v, t in zip((mean, rstd, new_mean, new_var), types)))


@RULES.register(aten._batch_norm_with_update_functional.default)
def batch_norm_with_update(ctx, x, weight, bias, running_mean, running_var, momentum, eps):
    """Training batch norm, with the (empty) reserve buffer that cuDNN would fill as the fourth
    result."""
    y, mean, rstd, new_mean, new_var = _batch_norm_update(
        ctx, x, weight, bias, running_mean, running_var, momentum, eps
    )
    return y, mean, rstd, knp.zeros(ctx.out[3].shape, ctx.out[3].dtype), new_mean, new_var


@RULES.register(aten.batch_norm_backward.default)
def batch_norm_backward(
    ctx,
    grad_out,
    x,
    weight,
    running_mean,
    running_var,
    save_mean,
    save_rstd,
    update,
    eps,
    output_mask,
    reserve,
):
    """In training (``update``) the statistics are the saved batch ones, which depend on ``x``;
    in evaluation they are the running ones, constants: ``grad_input = grad · weight · rstd``."""
    channel = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    reduced = (0, *range(2, x.ndim))
    compute = compute_dtype(knp.dtype_of(grad_out))
    if update:
        mean, rstd = save_mean, save_rstd
    else:
        mean = running_mean
        rstd = knp.rsqrt(knp.add(knp.astype(running_var, compute), eps))
    mean, rstd = knp.reshape(mean, channel), knp.reshape(rstd, channel)
    mask = output_mask if update else [False, *output_mask[1:]]
    grads = _norm_backward(ctx, grad_out, x, mean, rstd, weight, reduced, channel, mask)
    if not update and output_mask[0]:
        if weight is not None:
            rstd = knp.multiply(rstd, knp.reshape(knp.astype(weight, compute), channel))
        grads[0] = knp.astype(knp.multiply(knp.astype(grad_out, compute), rstd), ctx.out[0].dtype)
    return tuple(
        v if v is None or k == 0 else knp.reshape(v, t.shape)
        for k, (v, t) in enumerate(zip(grads, ctx.out))
    )


# -- attention ---------------------------------------------------------------------------------


def _attention_scores(q, k, is_causal, attn_mask, scale):
    """``q kᵀ · scale`` with the causal (top-left aligned) and/or given mask applied."""
    scores = knp.multiply(knp.matmul(q, knp.transpose(k, (0, 1, 3, 2))), scale)
    if attn_mask is not None:  # additive; the op is called with boolean masks already converted
        scores = knp.add(scores, knp.astype(attn_mask, knp.dtype_of(scores)))
    if is_causal:
        rows, cols = scores.shape[-2:]
        keep = knp.greater_equal(
            knp.reshape(knp.arange(rows), (rows, 1)), knp.reshape(knp.arange(cols), (1, cols))
        )
        scores = knp.where(keep, scores, -math.inf)
    return scores


def _check_attention(q, k, dropout_p) -> int:
    """How many query heads share each key/value head (grouped-query attention)."""
    require(
        dropout_p == 0,
        "dropout inside the fused attention op (its backward op would have to redraw the mask)",
    )
    require(
        q.ndim == 4 and q.shape[1] % k.shape[1] == 0,
        "attention needs 4-D q/k/v, query heads a multiple of kv",
    )
    return q.shape[1] // k.shape[1]


def _repeat_heads(t, group: int):
    """``(B, Hkv, S, E)`` to ``(B, Hkv·group, S, E)``: query head ``h`` reads kv head ``h // group``."""
    if group == 1:
        return t
    b, h, s, e = t.shape
    return knp.reshape(
        knp.broadcast_to(knp.expand_dims(t, 2), (b, h, group, s, e)), (b, h * group, s, e)
    )


def _sum_heads(t, group: int):
    """The adjoint of ``_repeat_heads``: gradients of the query heads sharing a kv head add up."""
    if group == 1:
        return t
    b, h, s, e = t.shape
    return knp.sum(knp.reshape(t, (b, h // group, group, s, e)), 2)


@RULES.register(aten._scaled_dot_product_flash_attention_for_cpu.default)
def sdpa_flash_cpu(
    ctx, query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None
):
    """Softmax attention and the log-sum-exp of each score row (what the backward consumes).
    A row that is masked out entirely gives zeros and a log-sum-exp of 0, as torch's kernel does."""
    group = _check_attention(query, key, dropout_p)
    out_t, lse_t = ctx.out
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    q = upcast(query, out_t.dtype)
    k, v = (_repeat_heads(upcast(t, out_t.dtype), group) for t in (key, value))
    scores = _attention_scores(q, k, is_causal, attn_mask, scale)
    row_max = knp.max(scores, -1, keepdims=True)
    row_max = knp.where(knp.isinf(row_max), 0, row_max)
    lse = knp.add(
        knp.log(knp.sum(knp.exp(knp.subtract(scores, row_max)), -1, keepdims=True)), row_max
    )
    lse = knp.where(knp.isinf(lse), 0, lse)
    probs = knp.exp(knp.subtract(scores, lse))
    out = knp.matmul(probs, v)
    return knp.astype(out, out_t.dtype), knp.astype(knp.squeeze(lse, -1), lse_t.dtype)


@RULES.register(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def sdpa_flash_cpu_backward(
    ctx,
    grad_out,
    query,
    key,
    value,
    out,
    logsumexp,
    dropout_p,
    is_causal,
    *,
    attn_mask=None,
    scale=None,
):
    """Gradients from the recomputed probabilities ``P = exp(S - lse)``:
    ``dV = Pᵀ dO``, ``dS = P (dO Vᵀ - rowsum(dO ∘ O))``, ``dQ = dS K · scale``, ``dK = dSᵀ Q · scale``."""
    group = _check_attention(query, key, dropout_p)
    dtype = ctx.out[0].dtype
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    g, q, o = (upcast(t, dtype) for t in (grad_out, query, out))
    k, v = (_repeat_heads(upcast(t, dtype), group) for t in (key, value))
    lse = knp.expand_dims(knp.astype(logsumexp, compute_dtype(dtype)), -1)
    scores = _attention_scores(q, k, is_causal, attn_mask, scale)
    probs = knp.exp(knp.subtract(scores, lse))
    swap = (0, 1, 3, 2)
    grad_v = knp.matmul(knp.transpose(probs, swap), g)
    delta = knp.sum(knp.multiply(g, o), -1, keepdims=True)
    grad_s = knp.multiply(probs, knp.subtract(knp.matmul(g, knp.transpose(v, swap)), delta))
    grad_q = knp.multiply(knp.matmul(grad_s, k), scale)
    grad_k = _sum_heads(knp.multiply(knp.matmul(knp.transpose(grad_s, swap), q), scale), group)
    grad_v = _sum_heads(grad_v, group)
    return tuple(knp.astype(t, d.dtype) for t, d in zip((grad_q, grad_k, grad_v), ctx.out))
