"""Small torch programs through ``torch.compile(backend="nkipy", options={"strict": True})``.

Where ``test_rules.py`` checks each rule on one ATen call, these run real user-level code through
dynamo, AOTAutograd and the core ATen decompositions, so the graphs hold the op mixtures,
promotions and backward formulas that models produce. ``strict`` makes any op without a rule
an error, so each case also proves that its forward (and backward) graphs lower completely.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from nkipy_core import FallbackWarning

_generator = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.float32):
    return torch.randn(shape, generator=_generator).to(dtype)


def idx(high, *shape):
    return torch.randint(0, high, shape, generator=_generator)


def _masked_put(x, m):
    y = x.clone()
    y[m] = 0.0
    return y


def _index_put(x, i, v):
    y = x.clone()
    y[:, i] = v
    return y


def _batch_norm_train(x, w, b):
    mean, var = torch.zeros(3), torch.ones(3)
    out = F.batch_norm(x, mean, var, w, b, training=True, momentum=0.1)
    return out, mean, var


def _cnn(x, w1, b1, w2):
    y = F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=1)), 2)
    y = F.conv2d(F.pad(y, (1, 1, 1, 1), mode="replicate"), w2, groups=2)
    return F.avg_pool2d(y, 2, ceil_mode=True) + F.adaptive_avg_pool2d(y, (2, 2))


def _embedding_bags(w, i, o, s):
    return (
        F.embedding_bag(i, w, o, mode="sum", per_sample_weights=s).sum(1)
        + F.embedding_bag(i, w, o, mode="mean", padding_idx=2).sum(1)
        + F.embedding_bag(i, w, o, mode="max").sum(1)
    )


def _grid_samples(x, g):
    return (
        F.grid_sample(x, g, align_corners=False)
        + F.grid_sample(x, g, mode="nearest", padding_mode="border", align_corners=True)
        + F.grid_sample(x, g, mode="bicubic", padding_mode="reflection", align_corners=False)
    )


def _strided_views(x):
    y = x * 2
    return y.as_strided((3, 4), (1, 3), 1) + y.as_strided((3, 4), (4, 1), 2).exp()


#: name -> (function, argument factory, differentiate the float arguments too)
PROGRAMS = {
    "pointwise-promotion": (
        lambda x, n: ((x * 2 + n).sin() / (x.abs() + 1)) ** 2 - n // 2,
        lambda: (randn(4, 5), idx(9, 5)),
        True,
    ),
    "activations": (
        lambda x: (
            F.gelu(x)
            + F.gelu(x, approximate="tanh")
            + F.silu(x)
            + F.elu(x)
            + F.leaky_relu(x)
            + F.hardtanh(x)
            + F.relu(x)
            + F.softplus(x)
            + F.mish(x)
        ),
        lambda: (randn(6, 7),),
        True,
    ),
    "softmax-family": (
        lambda x: torch.softmax(x, -1) * torch.log_softmax(x, 0),
        lambda: (randn(5, 6),),
        True,
    ),
    "cross-entropy": (
        lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
        lambda: (randn(8, 10), idx(10, 8)),
        True,
    ),
    "mse-loss": (
        lambda x, y: F.mse_loss(x, y) + F.l1_loss(x, y) + F.smooth_l1_loss(x, y),
        lambda: (randn(4, 6), randn(4, 6)),
        True,
    ),
    "layer-norm": (
        lambda x, w, b: F.layer_norm(x, (8,), w, b),
        lambda: (randn(3, 5, 8), randn(8), randn(8)),
        True,
    ),
    "rms-norm": (
        lambda x, w: F.rms_norm(x, (8,), w, eps=1e-6),
        lambda: (randn(3, 5, 8), randn(8)),
        True,
    ),
    "group-norm": (
        lambda x, w, b: F.group_norm(x, 2, w, b),
        lambda: (randn(2, 4, 3, 3), randn(4), randn(4)),
        True,
    ),
    "batch-norm-train": (_batch_norm_train, lambda: (randn(4, 3, 5), randn(3), randn(3)), True),
    "batch-norm-eval": (
        lambda x: F.batch_norm(x, torch.full((3,), 0.5), torch.full((3,), 2.0), training=False),
        lambda: (randn(4, 3, 5),),
        True,
    ),
    "embedding": (
        lambda w, i: F.embedding(i, w, padding_idx=0).sum(1),
        lambda: (randn(10, 4), idx(10, 3, 5)),
        True,
    ),
    "reductions": (
        lambda x: (
            x.sum(0)
            + x.mean(0)
            + x.var(0)
            + x.std(0, correction=0)
            + x.amax(0)
            + x.logsumexp(0)
            + x.norm(dim=0)
            + x.prod(0)
        ),
        lambda: (randn(5, 4),),
        True,
    ),
    "arg-reductions": (
        lambda x: (
            x.argmax(1),
            x.max(0).indices,
            x.min(1).values,
            x.argsort(1),
            x.topk(2).values,
            x.sort(0, descending=True).values,
        ),
        lambda: (randn(4, 6),),
        False,
    ),
    "scans": (lambda x: x.cumsum(1) + x.cumprod(0), lambda: (randn(4, 5),), True),
    "any-all": (
        lambda x: ((x > 0).any(1), (x > -3).all(), x.isnan().any(), torch.count_nonzero(x > 0)),
        lambda: (randn(4, 5),),
        False,
    ),
    "advanced-indexing": (
        lambda x, i, j: x[i].sum(1) + x[:, j].sum(0)[:3] + x[i, j[:3]],
        lambda: (randn(6, 7), idx(6, 3), idx(7, 5)),
        True,
    ),
    "index-put": (_index_put, lambda: (randn(4, 6), torch.tensor([5, 0, 2]), randn(4, 3)), True),
    "masked": (
        lambda x, m: _masked_put(x, m) + x.masked_fill(m, -1.0) + torch.where(m, x, x * 2),
        lambda: (randn(4, 5), randn(4, 5) > 0),
        True,
    ),
    "gather-scatter": (
        lambda x, i, s: (
            x.gather(1, i)
            + torch.zeros(4, 6).scatter_add(1, i, s)[:, :3]
            + x.index_select(0, i[:, 0] % 4)[:, :3]
        ),
        lambda: (randn(4, 6), idx(6, 4, 3), randn(4, 3)),
        True,
    ),
    "tril-triu": (lambda x: x.tril() - x.triu(1) + torch.eye(5), lambda: (randn(5, 5),), True),
    "shapes": (
        lambda x: (
            torch.cat([x.flip(0), x.roll(2, 1)], 1)
            .view(4, 2, -1)
            .transpose(0, 2)
            .reshape(-1, 4)[::2]
            + 0
        ),
        lambda: (randn(4, 6),),
        True,
    ),
    "split-stack": (
        lambda x: (
            torch.stack([a * i for i, a in enumerate(x.chunk(3, 1))], 0).sum(0)
            + torch.stack(x.unbind(1)[:2], 1).repeat(1, 1)
        ),
        lambda: (randn(4, 6),),
        True,
    ),
    "pad-expand": (
        lambda x: F.pad(x, (1, 2, 0, 1), value=0.5) + x.mean().expand(5, 9) + x.diagonal().sum(),
        lambda: (randn(4, 6),),
        True,
    ),
    "linear-matmul": (
        lambda x, w, b, y: (
            F.linear(x, w, b) @ y + torch.einsum("bij,bjk->bik", x, w.T.expand(2, 6, 5)).sum()
        ),
        lambda: (randn(2, 3, 6), randn(5, 6), randn(5), randn(5, 4)),
        True,
    ),
    "factories": (
        lambda x: (
            x
            + torch.arange(6) * 0.5
            + torch.linspace(-1, 1, 6)
            + torch.ones_like(x) * torch.full((4, 1), 2.0)
        ),
        lambda: (randn(4, 6),),
        True,
    ),
    "casts": (
        lambda x: (
            (x.to(torch.bfloat16) * 3).float()
            + x.long().float()
            + (x > 0).float()
            + x.double().sum().float()
        ),
        lambda: (randn(4, 6) * 3,),
        True,
    ),
    "dropout-eval": (
        lambda x: F.dropout(x, 0.0) + F.dropout(x, 0.5, training=False),
        lambda: (randn(4, 6),),
        True,
    ),
    "sdpa-causal": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda: (randn(2, 2, 6, 4), randn(2, 2, 6, 4), randn(2, 2, 6, 4)),
        True,
    ),
    "sdpa-masks": (
        lambda q, k, v, m: (
            F.scaled_dot_product_attention(q, k, v, attn_mask=m)
            + F.scaled_dot_product_attention(q, k, v, attn_mask=m > 0, scale=0.2)
        ),
        lambda: (randn(2, 2, 5, 4), randn(2, 2, 7, 4), randn(2, 2, 7, 4), randn(5, 7)),
        True,
    ),
    "cnn": (
        _cnn,
        lambda: (randn(2, 3, 8, 8), randn(4, 3, 3, 3), randn(4), randn(6, 2, 3, 3)),
        True,
    ),
    "conv-transpose-1d-3d": (
        lambda x, w, v, u: (
            F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1).sum((2, 3))
            + F.conv1d(x[..., 0], w[:, :, 0], dilation=2).sum(-1)
            + F.conv3d(v, u, padding=1).mean((1, 2, 3, 4)).reshape(2, 1)
        ),
        lambda: (randn(2, 4, 5, 5), randn(4, 4, 3, 3), randn(2, 2, 3, 4, 4), randn(3, 2, 2, 2, 2)),
        True,
    ),
    "sdpa-grouped-query": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        lambda: (randn(2, 4, 6, 8), randn(2, 2, 6, 8), randn(2, 2, 6, 8)),
        True,
    ),
    "adaptive-max-pool": (
        lambda x: F.adaptive_max_pool2d(x, (3, 2)) + F.interpolate(x, size=(3, 2)),
        lambda: (randn(2, 3, 7, 5),),
        True,
    ),
    "statistics-and-search": (
        lambda x, b: (
            torch.var_mean(x, 1)[0] + torch.fmax(x, x * 0.5).sum(1) + torch.hypot(x, x + 1).mean(1),
            torch.bucketize(x, b),
        ),
        lambda: (randn(4, 5), torch.tensor([-1.0, 0.0, 0.5])),
        True,
    ),
    "distances": (
        lambda a, b: torch.cdist(a, b).sum(1) + torch.cdist(a, b, p=1).sum(1) + F.pdist(a).sum(),
        lambda: (randn(4, 3), randn(5, 3)),
        True,
    ),
    "special-functions": (
        lambda x: (
            torch.lgamma(x)
            + torch.digamma(x.abs() + 0.5)
            + torch.erfinv(x.tanh() * 0.9)
            + torch.erfc(x)
            + torch.copysign(x, -x)
            + torch.signbit(x).float()
        ),
        lambda: (randn(4, 5) * 3,),
        True,
    ),
    "running-extremes": (
        lambda x: (
            torch.cummax(x, 1).values * 2 + torch.cummin(x, 0).values + torch.logcumsumexp(x, 1)
        ),
        lambda: (randn(4, 6),),
        True,
    ),
    "order-statistics": (
        lambda x: (
            x.kthvalue(2, 1).values + x.median(1).values + x.nanmedian(1).values,
            x.median(),
            x.median(0).indices,
        ),
        lambda: (randn(4, 7),),
        True,
    ),
    "reducing-scatters": (
        lambda x, i, s: (
            x.scatter_reduce(1, i, s, "amax")
            + x.scatter_reduce(1, i, s, "prod", include_self=False)
            + x.index_reduce(0, i[:, 0] % 4, s[:, :1].expand(4, 6), "amin")
        ),
        lambda: (randn(4, 6), idx(6, 4, 3), randn(4, 3)),
        True,
    ),
    "embedding-bag": (
        _embedding_bags,
        lambda: (
            randn(10, 3),
            torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0]),
            torch.tensor([0, 3, 3, 6]),
            randn(10),
        ),
        True,
    ),
    "grid-sample": (_grid_samples, lambda: (randn(2, 3, 5, 4), randn(2, 4, 3, 2) * 0.7), True),
    "as-strided": (_strided_views, lambda: (randn(4, 4),), True),
    "searchsorted-sorter": (
        lambda s, v: torch.searchsorted(s, v, sorter=s.argsort(-1)),
        lambda: (randn(3, 6), randn(3, 4)),
        False,
    ),
    "bf16-mlp": (
        lambda x, w1, w2: F.linear(F.silu(F.linear(x, w1)), w2).softmax(-1),
        lambda: (
            randn(4, 8, dtype=torch.bfloat16),
            randn(16, 8, dtype=torch.bfloat16),
            randn(8, 16, dtype=torch.bfloat16),
        ),
        True,
    ),
    "bf16-norm-attention": (
        lambda x: F.scaled_dot_product_attention(*[F.layer_norm(x, (8,))] * 3, is_causal=True).mean(
            -1
        ),
        lambda: (randn(2, 3, 6, 8, dtype=torch.bfloat16),),
        True,
    ),
    # overlapping windows repeat an index, always with the same maximum: it is written once
    "max-unpool-overlapping": (
        lambda x: F.max_unpool2d(*F.max_pool2d(x, 3, stride=1, return_indices=True), 3, stride=1),
        lambda: (randn(2, 3, 6, 6),),
        True,
    ),
    # col2im (unfold's backward) once failed to infer the channels of an empty batch
    "unfold-empty-batch": (lambda x: F.unfold(x, 2, padding=1), lambda: (randn(0, 3, 4, 4),), True),
    "pad-circular": (
        lambda x: F.pad(x, (1, 2, 2, 0), mode="circular"),
        lambda: (randn(2, 3, 4),),
        True,
    ),
    "sgn-and-zero-grad": (
        lambda x: torch.sgn(x) + x.new_empty_strided((3, 4), (1, 3)).zero_(),
        lambda: (randn(3, 4),),
        True,
    ),
}

TOLERANCE = {
    torch.float32: (1e-4, 1e-5),
    torch.bfloat16: (3e-2, 3e-2),
    torch.int64: (0, 0),
    torch.bool: (0, 0),
}


def _leaves(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _assert_close(actual, expected, what):
    for a, e in zip(_leaves(actual), _leaves(expected), strict=True):
        rtol, atol = TOLERANCE[e.dtype]
        torch.testing.assert_close(
            a, e, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{what}: {m}"
        )


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_lowers_completely_and_matches_eager(name):
    fn, make_args, differentiate = PROGRAMS[name]
    args = make_args()
    eager_args = [a.clone().requires_grad_(differentiate and a.is_floating_point()) for a in args]
    compiled_args = [
        a.clone().requires_grad_(differentiate and a.is_floating_point()) for a in args
    ]
    expected = fn(*eager_args)
    actual = torch.compile(fn, backend="nkipy", options={"strict": True})(*compiled_args)
    _assert_close(actual, expected, "output")
    if differentiate:
        seed = torch.Generator().manual_seed(1)
        outputs = [o for o in _leaves(expected) if o.requires_grad]
        grads = [torch.randn(o.shape, generator=seed).to(o.dtype) for o in outputs]
        torch.autograd.backward(outputs, grads)
        torch.autograd.backward([o for o in _leaves(actual) if o.requires_grad], grads)
        for i, (a, e) in enumerate(zip(compiled_args, eager_args)):
            if e.grad is not None:
                _assert_close(a.grad, e.grad, f"gradient of argument {i}")


def test_a_rule_that_declines_falls_back_with_its_reason():
    """A descending sort of bools cannot negate its keys: the rule declines, strict names why."""
    fn = torch.compile(
        lambda x: torch.sort(x, descending=True), backend="nkipy", options={"strict": True}
    )
    with pytest.raises(
        torch._dynamo.exc.BackendCompilerFailed, match="negation does not reverse its order"
    ):
        fn(torch.tensor([True, False, True]))


def test_math_constants_survive_bf16():
    """A bf16 tensor times a Python float computes with the unrounded scalar, as torch does."""
    x = torch.full((3,), 3.0, dtype=torch.bfloat16)
    fn = torch.compile(lambda v: v * math.pi, backend="nkipy", options={"strict": True})
    assert torch.equal(fn(x), x * math.pi)


#: Python scalars with half tensors: torch rounds most of them to the tensor's dtype first, but
#: not the multiplier or divisor of mul/div (nkipy_ops_base.opmath); compiled must be bit-exact.
SCALAR_PROGRAMS = {
    "add": lambda x: x + 0.1,
    "rsub": lambda x: 1 / 3 - x,
    "alpha": lambda x: torch.add(x, x.flip(0), alpha=1.1) - torch.sub(x, 0.3, alpha=-0.7),
    "mul-div": lambda x: x * 0.1 / 3.3 + torch.div(x, 1e-3, rounding_mode="floor"),
    "pow-scalar-base": lambda x: 1.1 ** (x * 6),
    "pow-scalar-exponent": lambda x: (x.abs() + 0.1) ** 1.7,
    "remainder-fmod": lambda x: torch.remainder(x, 0.3) + torch.fmod(x, -1 / 3),
    "clamp-where": lambda x: torch.where(x > 0.1, x.clamp(max=1.1), 0.7),
    "full": lambda x: x * torch.full_like(x, 1 / 3) + F.pad(x, (1, 0), value=1.1)[..., 1:],
    # the method: dynamo itself splits torch.addcdiv(..., value=v) into div, mul and add
    "addcmul-addcdiv": lambda x: (
        torch.addcmul(x, x, x.flip(1), value=0.1) - x.addcdiv(x, x.abs() + 1, value=1 / 3)
    ),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name", SCALAR_PROGRAMS)
def test_python_scalars_with_half_tensors_are_bit_exact(name, dtype):
    fn = SCALAR_PROGRAMS[name]
    x = (torch.rand(4, 64, generator=_generator, dtype=torch.float64) * 8 - 4).to(dtype)
    compiled = torch.compile(fn, backend="nkipy", options={"strict": True})
    assert torch.equal(compiled(x), fn(x))


def test_a_float_argument_with_a_half_tensor_is_bit_exact():
    """A float passed as an argument may reach the graph as a 0-d f64 tensor: same rule."""
    fn = torch.compile(lambda x, s: (x + s, x * s), backend="nkipy", options={"strict": True})
    x = randn(64, dtype=torch.float16)
    for s in (0.1, 1 / 3):
        for got, want in zip(fn(x, s), (x + s, x * s)):
            assert torch.equal(got, want)


def test_bf16_scalar_result_keeps_its_shape():
    x = randn(4, 6, dtype=torch.bfloat16)
    fn = torch.compile(lambda v: F.mse_loss(v, v * 0.5), backend="nkipy", options={"strict": True})
    _assert_close(fn(x), F.mse_loss(x, x * 0.5), "loss")


def test_out_nodes_in_an_unfunctionalized_graph_write_their_arguments():
    """A graph that keeps ``out=`` forms (not what AOTAutograd gives, but a valid ATen graph)
    lowers completely, and what the node wrote is what later reads and the caller see."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from nkipy_core.compiler.pipeline import compile_graph
    from nkipy_core.config import settings as config

    def program(a, b, o):
        torch.atan2(a, b, out=o)
        return o * 2

    args = (randn(3, 4), randn(3, 4), torch.empty(3, 4))
    gm = make_fx(program)(*[x.clone() for x in args])
    assert "aten.atan2.out" in {str(n.target) for n in gm.graph.nodes}
    expected_args = [x.clone() for x in args]
    expected = program(*expected_args)
    compiled = compile_graph(gm, args, config.Config(strict=True))
    actual_args = [x.clone() for x in args]
    actual = compiled(*actual_args)
    _assert_close(actual, expected, "outputs")
    _assert_close(actual_args, expected_args, "arguments written")


def test_as_strided_reads_the_storage_of_each_call_not_a_cached_kernel():
    """Two calls whose inputs have one shape but different layouts compile to different plans:
    as_strided addresses storage, so the transposed input is declined (and runs on CPU) instead
    of reusing the kernel lowered for the contiguous one."""

    def fn(x):
        return x.as_strided((3, 3), (1, 3)) * 2

    compiled = torch.compile(fn, backend="nkipy", dynamic=False)  # both graphs have static shapes
    x = randn(4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        _assert_close(compiled(x), fn(x), "contiguous input")
    transposed = randn(4, 4).t()
    with pytest.warns(FallbackWarning, match="as_strided of a non-contiguous tensor"):
        actual = compiled(transposed)
    _assert_close(actual, fn(transposed), "transposed input")


@pytest.mark.parametrize("dynamic", [False, None], ids=["static", "automatic"])
def test_as_strided_with_a_storage_offset_of_a_graph_input_is_declined(dynamic):
    """An explicit storage_offset addresses the input's storage, and the input's own offset is
    not guarded between calls: the rule declines rather than bake the first call's offset in."""

    def fn(x):
        return torch.as_strided(x, (4,), (1,), 10) * 2

    compiled = torch.compile(fn, backend="nkipy", dynamic=dynamic)
    base = torch.arange(64.0).reshape(8, 8)
    with pytest.warns(FallbackWarning, match="explicit storage_offset of a graph input"):
        _assert_close(compiled(base[1:4]), fn(base[1:4]), "offset 8")
    _assert_close(compiled(base[2:5]), fn(base[2:5]), "offset 16")


def test_as_strided_with_a_storage_offset_inside_a_kernel_is_lowered():
    def fn(x):
        return (x * 2).as_strided((3, 3), (1, 3), 1) + 1

    x = randn(4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        _assert_close(torch.compile(fn, backend="nkipy", dynamic=False)(x), fn(x), "intermediate")


def test_outputs_have_the_strides_eager_gives_them(graphs):
    """A kernel output that eager lays out transposed (here the transposed activation a Linear's
    backward saves) comes back with eager's strides, so AOTAutograd and the size-set
    specialisation see the layouts they were traced with."""

    def f(a, b):
        return (a[0] * 2).t(), (a + b).permute(2, 0, 1), a - b

    a, b = torch.randn(3, 4, 5), torch.randn(3, 4, 5)
    for got, want in zip(torch.compile(f, backend="nkipy")(a, b), f(a, b)):
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()


def _moe_experts(x, w1, w2, w3, offsets):
    """TorchTitan's grouped experts: SwiGLU per expert over the rows routed to it."""
    h = F.silu(torch._grouped_mm(x.bfloat16(), w1.bfloat16().transpose(-2, -1), offs=offsets))
    h = h * torch._grouped_mm(x.bfloat16(), w3.bfloat16().transpose(-2, -1), offs=offsets)
    return torch._grouped_mm(
        h, w2.bfloat16().transpose(-2, -1), offs=offsets, out_dtype=torch.bfloat16
    )


def test_grouped_mm_experts_match_eager_for_offsets_given_at_run_time(graphs):
    """One compiled forward and backward for every offsets tensor (its values are data, not part
    of any key), the backward's weight gradients being 2-D x 2-D grouped products; an empty
    expert included. Every row is routed: torch leaves rows past the last offset unwritten."""
    experts, dim, hidden, tokens = 3, 8, 16, 16
    args = [
        randn(tokens, dim),
        randn(experts, hidden, dim),
        randn(experts, dim, hidden),
        randn(experts, hidden, dim),
    ]
    compiled = torch.compile(_moe_experts, backend="nkipy", options={"strict": True})
    for offsets in ([5, 5, 16], [0, 16, 16], [1, 2, 16]):
        offs = torch.tensor(offsets, dtype=torch.int32)
        eager_args = [a.clone().requires_grad_() for a in args]
        compiled_args = [a.clone().requires_grad_() for a in args]
        expected, actual = _moe_experts(*eager_args, offs), compiled(*compiled_args, offs)
        _assert_close(actual, expected, f"output, offsets {offsets}")
        grad = randn(*expected.shape, dtype=torch.bfloat16)
        expected.backward(grad)
        actual.backward(grad)
        for i, (a, e) in enumerate(zip(compiled_args, eager_args)):
            _assert_close(a.grad, e.grad, f"gradient of argument {i}, offsets {offsets}")
    assert len(graphs) == 2


def test_an_overwrite_repeating_an_index_keeps_one_of_its_values():
    """ATen leaves the winner unspecified; the kernel keeps one of the values, never a mix."""
    x = torch.zeros(5)
    index = torch.tensor([1, 3, 1, 1])
    values = torch.tensor([2.0, -1.0, 7.0, -4.0])
    out = torch.compile(lambda v: v.index_put((index,), values), backend="nkipy")(x)
    assert out[1] in (2.0, 7.0, -4.0) and out[3] == -1.0
    assert torch.equal(out[[0, 2, 4]], torch.zeros(3))
