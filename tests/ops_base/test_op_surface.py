"""The rest of PyTorch's op surface inside kernels: sliding windows and the ``*_copy`` views,
``addbmm``/``bilinear``/``dist``, batch norm without running-stat updates, a float's parts
(``frexp``, ``ldexp``, ``nextafter``), histograms, ``mode``, ``segment_reduce``, 3-D grid
sampling and adaptive max pooling, and antialiased bilinear resampling.

Each case is compiled with ``strict`` (an op without a rule is an error) and compared with eager,
forward and, where the op is differentiable, backward; inputs include zeros, infinities, NaNs,
subnormals and ties where the op treats them specially. A few cases check what is declined.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from nkipy_core import Unsupported
from nkipy_core.ir import DType

_generator = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.float32):
    return torch.randn(shape, generator=_generator, dtype=torch.float64).to(dtype)


def compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="nkipy", options={"strict": True})


def _flat(results):
    if isinstance(results, torch.Tensor):
        return [results]
    return [t for r in results for t in _flat(r)]


def check(fn, *args, exact=False, grad=False, rtol=1e-5, atol=1e-6):
    """``fn`` compiled against eager on ``args`` (and the gradients of float arguments, for a
    random cotangent, when ``grad``); ``exact`` compares bits (NaN equal to NaN, signed zeros)."""
    inputs = [a.clone().requires_grad_(grad and a.is_floating_point()) for a in args]
    expected = _flat(fn(*inputs))
    got_inputs = [a.clone().requires_grad_(grad and a.is_floating_point()) for a in args]
    got = _flat(compiled(fn)(*got_inputs))
    for e, g in zip(expected, got):
        assert e.dtype == g.dtype and e.shape == g.shape
        if exact:
            assert torch.equal(e.isnan(), g.isnan())
            assert torch.equal(torch.where(e.isnan(), 0, e), torch.where(g.isnan(), 0, g))
            if e.is_floating_point():  # (a NaN's sign is unspecified)
                assert torch.equal(e[~e.isnan()].signbit(), g[~e.isnan()].signbit())
        else:
            torch.testing.assert_close(g, e, rtol=rtol, atol=atol, equal_nan=True)
    if grad:
        cotangents = [randn(*e.shape, dtype=e.dtype) for e in expected if e.requires_grad]
        wanted = [a for a in inputs if a.requires_grad]
        e_grads = torch.autograd.grad([e for e in expected if e.requires_grad], wanted, cotangents)
        g_grads = torch.autograd.grad(
            [g for g in got if g.requires_grad],
            [a for a in got_inputs if a.requires_grad],
            cotangents,
        )
        for e, g in zip(e_grads, g_grads):
            torch.testing.assert_close(g, e, rtol=rtol, atol=10 * atol, equal_nan=True)


# -- views and products ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.unfold(1, 3, 2) * 2,
        lambda x: x.unfold(-1, 5, 1).sum(-1),
        lambda x: torch.unfold_copy(x, 0, 2, 3),
        lambda x: torch.view_copy(x, (3, 20)) + 1,
        lambda x: torch.permute_copy(x, (2, 0, 1)) + 1,
        lambda x: torch.narrow_copy(x, 1, -3, 2) + 1,
        lambda x: [t * 2 for t in torch.unbind_copy(x, 1)],
        lambda x: torch.as_strided_copy(x, (2, 3), (5, 2)) + 1,
    ],
    ids=[
        "unfold",
        "unfold_sum",
        "unfold_copy",
        "view_copy",
        "permute",
        "narrow",
        "unbind",
        "strided",
    ],
)
def test_views_and_copies(fn):
    check(fn, randn(3, 4, 5), grad=True)


def test_unfold_of_a_scalar():
    check(lambda x: x.unfold(0, 1, 1) * 2, randn(), grad=True)


def test_addbmm_bilinear_and_dist():
    bias, b1, b2 = randn(3, 5), randn(4, 3, 6), randn(4, 6, 5)
    check(lambda c, a, b: torch.addbmm(c, a, b, beta=0.5, alpha=2), bias, b1, b2, grad=True)
    check(lambda c, a, b: torch.addbmm(c, a, b, beta=0), bias.fill_(math.nan), b1, b2)
    x1, x2, w, b = randn(2, 7, 3), randn(2, 7, 4), randn(5, 3, 4), randn(5)
    check(F.bilinear, x1, x2, w, b, grad=True)
    check(lambda a, c, v: F.bilinear(a, c, v), randn(3), randn(4), w, grad=True)
    check(F.bilinear, randn(0, 3), randn(0, 4), w, b)
    x, y = randn(4, 5), randn(5)
    for p in (0, 1, 2, 3.5, math.inf, -math.inf):
        check(lambda a, c, p=p: torch.dist(a, c, p), x, y, grad=p != 0)
    check(lambda a, c: torch.dist(a, c), x.to(torch.bfloat16), y.to(torch.bfloat16), rtol=2e-2)


# -- batch norm --------------------------------------------------------------------------------


def test_batch_norm_in_eval_with_gradients():
    """Evaluation: the running statistics are constants of the backward
    (``batch_norm_backward`` with ``update=False``)."""
    bn = torch.nn.BatchNorm2d(3).eval()
    bn.running_mean.copy_(randn(3))
    bn.running_var.copy_(randn(3).abs() + 0.5)
    check(lambda x: bn(x), randn(2, 3, 4, 4), grad=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_norm_training_and_instance_norm(dtype):
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else {}
    w, b = randn(3, dtype=dtype), randn(3, dtype=dtype)

    def train(x, w, b):
        mean, var = torch.zeros(3, dtype=dtype), torch.ones(3, dtype=dtype)
        return F.batch_norm(x, mean, var, w, b, training=True), mean, var

    check(train, randn(4, 3, 5, dtype=dtype), w, b, grad=True, **tol)
    check(lambda x: F.instance_norm(x), randn(2, 3, 6, dtype=dtype), grad=True, **tol)
    check(
        lambda x, w, b: F.batch_norm(x, None, None, w, b, True),
        randn(4, 3, dtype=dtype),
        w,
        b,
        grad=True,
        **tol,
    )


# -- a float's parts ---------------------------------------------------------------------------

_FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


def _specials(dtype):
    info = torch.finfo(dtype)
    tiny = info.smallest_normal
    values = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        3.0,
        -7.5,
        1e-3,
        info.max,
        -info.max,
        tiny,
        tiny * info.eps,
    ]
    values += [3 * tiny * info.eps, tiny / 2, math.inf, -math.inf, math.nan, 1 - info.eps / 2]
    spread = randn(100, dtype=torch.float64) * torch.exp(randn(100, dtype=torch.float64) * 4)
    return torch.cat([torch.tensor(values, dtype=torch.float64), spread]).to(dtype)


@pytest.mark.parametrize("dtype", _FLOATS, ids=str)
def test_float_parts_are_exact(dtype):
    x = _specials(dtype)
    check(torch.frexp, x, exact=True)
    check(torch.ldexp, x, torch.randint(-30, 30, x.shape, generator=_generator), exact=True)
    a, b = torch.meshgrid(x[:18], x[:18], indexing="ij")
    check(torch.nextafter, a.reshape(-1), b.reshape(-1), exact=True)
    check(torch.nextafter, x, -x, exact=True)


def test_float_parts_gradients():
    check(lambda x: torch.frexp(x).mantissa * 3, randn(10), grad=True)
    check(lambda x, e: torch.ldexp(x, e), randn(10), randn(10), grad=True)


# -- histograms and mode -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", _FLOATS, ids=str)
@pytest.mark.parametrize("bins, low, high", [(7, 0, 0), (10, -1.3, 2.7), (1, 0, 1), (5, 2, 2)])
def test_histc(dtype, bins, low, high):
    x = randn(300, dtype=dtype) * 1.5
    x[:3] = torch.tensor([low, high, (low + high) / 2])
    if low != high:  # a range from the data must be finite (torch raises)
        x[3] = math.nan
    check(lambda t: torch.histc(t, bins, low, high), x, exact=True)


def test_histc_of_a_constant_widens_the_range():
    check(lambda t: torch.histc(t, 4), torch.full((4,), 3.0), exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_histogram(dtype):
    x = randn(4, 100, dtype=dtype)
    for bins in (1, 5, 64):
        check(lambda t, bins=bins: torch.histogram(t, bins), x)
        check(lambda t, bins=bins: torch.histogram(t, bins, range=(-1.0, 2.0), density=True), x)
        check(lambda t, w, bins=bins: torch.histogram(t, bins, weight=w), x, x.abs())
        edges = torch.sort(randn(bins + 1, dtype=dtype)).values
        check(lambda t, e: torch.histogram(t, e, density=True), x, edges)
    check(lambda t: torch.histogram(t, 4), torch.full((4,), 3.0, dtype=dtype))


def test_histogram_with_too_many_edges_is_declined():
    from nkipy_ops_base.lowerings_histogram import histogram_edges

    class Big:
        shape, size = (2**20,), 2**20

    with pytest.raises(Unsupported, match="limit"):
        histogram_edges(None, Big(), Big())


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool], ids=str)
def test_mode_values_and_an_index_of_them(dtype):
    """Many ties: the smallest of the most frequent values; the index names an occurrence."""
    x = torch.randint(0, 4, (6, 17), generator=_generator).to(dtype)
    values, indices = compiled(lambda t: torch.mode(t, 1))(x)
    assert torch.equal(values, torch.mode(x, 1).values)
    assert torch.equal(x.gather(1, indices[:, None])[:, 0], values)


def test_mode_exact_on_distinct_values_with_gradient():
    check(lambda t: torch.mode(t, 0, keepdim=True), randn(5, 4), grad=True, exact=False)
    check(
        lambda t: torch.mode(t), torch.tensor([[-0.0, 0.0, 1.0], [math.nan, 2.0, 2.0]]), exact=True
    )


# -- segment_reduce ----------------------------------------------------------------------------


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("initial", [None, 2.0])
def test_segment_reduce(reduce, initial):
    """Empty segments, ties and zeros (the special cases of each gradient)."""
    data = torch.tensor([0.0, 1, 1, 2, 0, 3, -1, 2, 2, 0, 5, 1])
    lengths = torch.tensor([2, 0, 3, 0, 7])

    def by_lengths(d):
        return torch.segment_reduce(d, reduce, lengths=lengths, initial=initial)

    def by_offsets(d):
        offsets = torch.tensor([[0, 1, 3, 3, 6], [0, 3, 3, 6, 6]])
        return torch.segment_reduce(d, reduce, offsets=offsets, axis=1, initial=initial)

    if initial is None and reduce != "sum":  # infinite or NaN rows: no gradient through them
        check(by_lengths, data)
        check(by_offsets, data.reshape(2, 6))
    else:
        check(by_lengths, data, grad=True)
        check(by_offsets, data.reshape(2, 6), grad=True)


# -- spatial -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_3d(mode, padding_mode, align_corners):
    x, grid = randn(2, 3, 4, 5, 6), randn(2, 3, 2, 4, 3) * 0.8

    def fn(v, g):
        return F.grid_sample(v, g, mode, padding_mode, align_corners)

    check(fn, x, grid, grad=True, rtol=1e-4, atol=1e-5)


def test_grid_sample_3d_half_floats_past_256_voxels():
    x, grid = randn(1, 2, 5, 20, 20, dtype=torch.bfloat16), randn(1, 3, 4, 5, 3)
    check(lambda v, g: F.grid_sample(v, g.to(v.dtype), align_corners=False), x, grid, exact=True)


def test_adaptive_max_pool3d():
    x = randn(2, 3, 7, 5, 6)
    x[0, 0, :2] = 1.0  # ties: the first maximum in window order
    check(lambda v: F.adaptive_max_pool3d(v, (3, 2, 4), return_indices=True), x, grad=True)


@pytest.mark.parametrize(
    "size, align_corners", [((3, 9), False), ((17, 5), False), ((8, 13), True), ((1, 1), True)]
)
def test_antialiased_bilinear(size, align_corners):
    x = randn(2, 3, 10, 12)

    def fn(v):
        return F.interpolate(v, size, mode="bilinear", align_corners=align_corners, antialias=True)

    check(fn, x, grad=True, atol=1e-5)


def test_antialiased_scale_factor_and_uint8_declined():
    check(
        lambda v: F.interpolate(v, scale_factor=(1.7, 0.6), mode="bilinear", antialias=True),
        randn(1, 2, 10, 20),
        grad=True,
    )
    from nkipy_ops_base.lowerings_spatial import upsample_bilinear2d_aa

    class Ctx:
        out_dtype = DType.u8

    with pytest.raises(Unsupported, match="u8"):
        upsample_bilinear2d_aa(Ctx(), None, (2, 2), False)
