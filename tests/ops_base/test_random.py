"""Random ops compiled into kernels: distributions, reproducibility, dropout, ``fallback_random``.

The kernels' numbers come from Philox, not from torch's Mersenne twister, so values are only
compared with eager under ``fallback_random``; otherwise they are tested statistically. Every
bound is five standard errors of the statistic for the sample size used (the seeds are fixed,
so the tests are deterministic; five sigmas keep them honest for any other seed too), and the
Kolmogorov-Smirnov statistic is compared with its critical value at significance 1e-4.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

import nkipy_core
from nkipy_core.compiler.kernel_call import KernelCall

N = 200_000
#: Kolmogorov-Smirnov critical value: P(sqrt(n) D > c) ~ 2 exp(-2 c^2) = 1e-4
KS_C = math.sqrt(-math.log(1e-4 / 2) / 2)


def compiled(fn, **options):
    return torch.compile(fn, backend="nkipy", options={"strict": True, **options})


def ks_statistic(sample: torch.Tensor, cdf) -> float:
    """``max |F_n(x) - F(x)|`` over the sorted sample."""
    x = sample.double().flatten().sort().values
    n = x.numel()
    f = cdf(x)
    upper = torch.arange(1, n + 1, dtype=torch.float64) / n - f
    lower = f - torch.arange(0, n, dtype=torch.float64) / n
    return max(upper.max().item(), lower.max().item())


def assert_moments(sample: torch.Tensor, mean: float, var: float, fourth: float) -> None:
    """Sample mean and variance within five standard errors (``fourth``: the 4th central moment)."""
    x = sample.double().flatten()
    n = x.numel()
    assert abs(x.mean().item() - mean) < 5 * math.sqrt(var / n)
    assert abs(x.var().item() - var) < 5 * math.sqrt((fourth - var**2) / n)


def assert_ks(sample: torch.Tensor, cdf) -> None:
    d = ks_statistic(sample, cdf)
    assert d < KS_C / math.sqrt(sample.numel()), f"KS statistic {d} for n={sample.numel()}"


def uniform_cdf(low, high):
    return lambda x: ((x - low) / (high - low)).clamp(0, 1)


def normal_cdf(mean, std):
    return lambda x: 0.5 * (1 + torch.erf((x - mean) / (std * math.sqrt(2))))


def test_ks_test_rejects_the_wrong_distribution():
    """The statistical check itself can fail: uniforms are not normal, and a shifted uniform is
    not uniform on [0, 1)."""
    u = torch.rand(N, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert_ks(u, uniform_cdf(0, 1))
    with pytest.raises(AssertionError):
        assert_ks(u, normal_cdf(0.5, math.sqrt(1 / 12)))
    with pytest.raises(AssertionError):
        assert_ks(u * 0.99, uniform_cdf(0, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_rand_is_uniform_on_zero_one(dtype):
    torch.manual_seed(0)
    u = compiled(lambda: torch.rand(N, dtype=dtype))()
    assert u.dtype == dtype and u.shape == (N,)
    assert u.min() >= 0 and u.max() < 1
    assert_moments(u, 0.5, 1 / 12, 1 / 80)
    if dtype != torch.bfloat16:  # bf16 has 256 levels: its CDF is a staircase
        assert_ks(u, uniform_cdf(0, 1))
    else:
        assert len(u.unique()) == 256


def test_uniform_fill_spans_its_range():
    torch.manual_seed(0)
    u = compiled(lambda x: torch.empty_like(x).uniform_(-2.0, 3.0))(torch.zeros(N))
    assert u.min() >= -2 and u.max() < 3
    assert_moments(u, 0.5, 25 / 12, 625 / 80)
    assert_ks(u, uniform_cdf(-2, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_randn_is_standard_normal(dtype):
    torch.manual_seed(0)
    z = compiled(lambda x: torch.randn_like(x))(torch.zeros(N, dtype=dtype))
    assert z.dtype == dtype and torch.isfinite(z).all()
    assert_moments(z, 0.0, 1.0, 3.0)
    assert_ks(z, normal_cdf(0, 1))


def test_normal_with_tensor_mean_and_std():
    torch.manual_seed(0)
    mean, std = torch.full((N,), 3.0), torch.full((N,), 0.5)
    z = compiled(torch.normal)(mean, std)
    assert_moments(z, 3.0, 0.25, 3 * 0.25**2)
    assert_ks(z, normal_cdf(3.0, 0.5))


def test_bernoulli_rate_follows_its_probabilities():
    torch.manual_seed(0)
    p = torch.cat([torch.full((N // 2,), 0.2), torch.full((N // 2,), 0.9)])
    b = compiled(torch.bernoulli)(p)
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    for half, rate in ((b[: N // 2], 0.2), (b[N // 2 :], 0.9)):
        assert abs(half.mean().item() - rate) < 5 * math.sqrt(rate * (1 - rate) / half.numel())


def test_randint_covers_its_range_uniformly():
    torch.manual_seed(0)
    low, high = -3, 7
    r = compiled(lambda: torch.randint(low, high, (N,)))()
    assert r.dtype == torch.int64 and r.min() == low and r.max() == high - 1
    counts = torch.bincount(r - low, minlength=high - low).double()
    expected = N / (high - low)
    assert (counts - expected).abs().max() < 5 * math.sqrt(expected)


def test_randperm_is_a_permutation():
    torch.manual_seed(0)
    fn = compiled(lambda: torch.randperm(1000))
    a, b = fn(), fn()
    assert torch.equal(a.sort().values, torch.arange(1000))
    assert not torch.equal(a, b)
    # every position is equally likely to hold a small value: the mean is (n - 1) / 2
    assert abs(a[:500].double().mean().item() - 499.5) < 5 * math.sqrt((1000**2 / 12) / 500)


def test_manual_seed_reproduces_and_calls_differ():
    fn = compiled(lambda x: x + torch.rand(4, 5))
    x = torch.zeros(4, 5)
    torch.manual_seed(42)
    keys = nkipy_core.cache_stats["random_keys"]
    first, second = fn(x), fn(x)
    assert nkipy_core.cache_stats["random_keys"] - keys == 2  # one host key per call
    torch.manual_seed(42)
    assert torch.equal(fn(x), first)
    assert torch.equal(fn(x), second)
    assert not torch.equal(first, second)


def test_reproducible_across_recompiles_from_a_warm_cache():
    """The key is an input, never baked into a cached kernel: a fresh compile that loads the
    kernel from the cache draws the same numbers under the same seed."""

    def fn():
        return torch.randn(64)

    torch.manual_seed(5)
    cold = compiled(fn)()
    torch._dynamo.reset()
    hits = nkipy_core.cache_stats["hits"]
    torch.manual_seed(5)
    warm = compiled(fn)()
    assert nkipy_core.cache_stats["hits"] > hits
    assert torch.equal(cold, warm)


def test_two_random_ops_in_one_graph_differ():
    torch.manual_seed(0)
    a, b = compiled(lambda: (torch.rand(256), torch.rand(256)))()
    assert not torch.equal(a, b)
    assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 5 / math.sqrt(256)


def test_random_ops_lower_without_fallback_warnings(graphs):
    def fn(x):
        return (
            torch.rand_like(x)
            + torch.randn(3, 4)
            + torch.randint(0, 5, (3, 4))
            + torch.bernoulli(torch.sigmoid(x))
            + torch.randperm(4)
            + F.dropout(x, 0.3, training=True)
        )

    with warnings.catch_warnings():
        warnings.simplefilter("error", nkipy_core.FallbackWarning)
        out = compiled(fn)(torch.randn(3, 4))
    assert out.shape == (3, 4)
    assert sum(isinstance(m, KernelCall) for m in graphs[0].children()) == 1


# -- dropout ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_keep_rate_and_scaling(p):
    torch.manual_seed(0)
    x = torch.rand(N) + 1  # no zeros, so a zero output means dropped
    y = compiled(lambda v: F.dropout(v, p, training=True))(x)
    kept = y != 0
    rate = kept.double().mean().item()
    assert abs(rate - (1 - p)) < 5 * math.sqrt(p * (1 - p) / N)
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))


def test_dropout_in_eval_is_the_identity():
    x = torch.randn(10)
    assert torch.equal(compiled(lambda v: F.dropout(v, 0.5, training=False))(x), x)


def test_dropout_backward_uses_the_forward_mask():
    torch.manual_seed(0)
    p = 0.4
    x = (torch.rand(64, 32) + 1).requires_grad_()
    upstream = torch.randn(64, 32)
    y = compiled(lambda v: F.dropout(v, p, training=True))(x)
    y.backward(upstream)
    kept = y.detach() != 0
    assert 0 < kept.sum() < kept.numel()
    torch.testing.assert_close(x.grad, upstream * kept / (1 - p))


def _mlp(dropout: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [
        torch.nn.Linear(8, 16),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.3),
        torch.nn.Linear(16, 4),
    ]
    return torch.nn.Sequential(
        *(layer for layer in layers if dropout or not isinstance(layer, torch.nn.Dropout))
    )


def _kernel_counts(graphs, model, **options) -> list[int]:
    graphs.clear()
    torch._dynamo.reset()
    out = compiled(model, **options)(torch.randn(5, 8))
    out.sum().backward()
    return [sum(isinstance(m, KernelCall) for m in g.children()) for g in graphs]


@pytest.mark.parametrize("fallback_random", [False, True])
def test_training_graph_with_dropout_compiles_to_as_many_kernels(graphs, fallback_random):
    without = _kernel_counts(graphs, _mlp(False))
    with_dropout = _kernel_counts(graphs, _mlp(True), fallback_random=fallback_random)
    assert with_dropout == without == [1, 1]


# -- fallback_random -----------------------------------------------------------------------------------


def _random_program(x):
    return (
        torch.rand(3, 4),
        torch.randn_like(x),
        torch.randint(-5, 5, (6,)),
        torch.randperm(7),
        torch.empty(5).uniform_(2, 3),
        torch.normal(1.0, 2.0, (4,)),
        torch.bernoulli(x.sigmoid(), p=0.3) * x,
        F.dropout(x * 2, 0.5, training=True),
    )


def test_fallback_random_is_bit_exact_with_eager(graphs):
    x = torch.randn(3, 4)
    host_ops = nkipy_core.cache_stats["host_random_ops"]
    fn = compiled(_random_program, fallback_random=True)
    for seed in (0, 1):
        torch.manual_seed(seed)
        expected = _random_program(x)
        torch.manual_seed(seed)
        actual = fn(x)
        for a, e in zip(actual, expected, strict=True):
            assert a.dtype == e.dtype and torch.equal(a, e)
    assert sum(isinstance(m, KernelCall) for m in graphs[0].children()) == 1
    assert nkipy_core.cache_stats["host_random_ops"] - host_ops == 8  # counted, at compile time


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("p", [0.1, 0.5, 1.0])
def test_fallback_random_dropout_is_bit_exact_with_eager(dtype, p):
    """``F.dropout`` on CPU rounds the kept value ``1/(1-p)`` to the dtype before multiplying;
    the host-noise split does the same, so half-float dropout matches eager bit for bit."""
    dropout = torch.nn.Dropout(p).train()
    x = torch.randn(64, 64).to(dtype)
    fn = compiled(dropout, fallback_random=True)
    torch.manual_seed(3)
    expected = dropout(x)
    torch.manual_seed(3)
    actual = fn(x)
    assert actual.dtype == expected.dtype and torch.equal(actual, expected)


def test_kernel_numbers_are_not_eagers():
    """Without ``fallback_random`` the numbers are Philox's (documented), not torch's."""
    torch.manual_seed(0)
    compiled_rand = compiled(lambda: torch.rand(16))()
    torch.manual_seed(0)
    assert not torch.equal(compiled_rand, torch.rand(16))


def test_randint_covers_ranges_wider_than_32_bits():
    torch.manual_seed(0)
    high = 3 * 2**40
    r = compiled(lambda: torch.randint(0, high, (4096,)))()
    assert r.min() >= 0 and r.max() < high
    assert r.max() > 2**40  # the upper bits are random too, not only a 32-bit word
    assert abs(r.double().mean().item() / high - 0.5) < 5 * math.sqrt(1 / 12 / 4096)


def test_half_precision_random_values_are_exact_and_below_one():
    """Uniform halves keep as many bits as their significand: never rounded up to 1."""
    torch.manual_seed(0)
    for dtype, levels in ((torch.float16, 2**11), (torch.bfloat16, 2**8)):
        u = compiled(lambda: torch.rand(50_000, dtype=dtype))()
        assert u.dtype == dtype and u.max() < 1 and u.min() >= 0
        assert torch.equal(u.double() * levels, (u.double() * levels).round())


def test_fallback_random_on_the_nkipy_device_matches_eager():
    """With ``fallback_random`` set for the process, eager device ops draw from torch's CPU
    generator too (without it they draw from the device's: tests/device/test_generator.py)."""
    nkipy_core.init_nkipy_backend(fallback_random=True)
    x = torch.randn(4, 8).to("nkipy")

    def fn(v):
        return F.dropout(v, 0.5, training=True) + torch.rand(4, 8, device=v.device)

    compiled_fn = compiled(fn, fallback_random=True)
    torch.manual_seed(3)
    expected = fn(x).cpu()
    torch.manual_seed(3)
    actual = compiled_fn(x)
    assert actual.device.type == "nkipy"
    assert torch.equal(actual.cpu(), expected)


def test_attention_dropout_in_training_lowers_completely(graphs):
    """With ``dropout_p > 0`` torch takes the math path of SDPA, whose dropout is ``native_dropout``."""
    q = torch.randn(2, 2, 5, 4, requires_grad=True)
    out = compiled(lambda t: F.scaled_dot_product_attention(t, t, t, dropout_p=0.3))(
        q
    )  # strict: no fallback
    out.sum().backward()
    assert out.shape == q.shape and torch.isfinite(q.grad).all()
    assert [sum(isinstance(m, KernelCall) for m in g.children()) for g in graphs] == [1, 1]


def test_init_nkipy_backend_sets_fallback_random_for_every_compile():
    nkipy_core.init_nkipy_backend(nkipy_cache="cache", fallback_random=True)
    fn = torch.compile(lambda: torch.randn(8), backend="nkipy")
    torch.manual_seed(9)
    expected = torch.randn(8)
    torch.manual_seed(9)
    assert torch.equal(fn(), expected)


@pytest.mark.parametrize("fallback_random", [False, True])
def test_attention_without_dropout_leaves_torchs_generator_alone(graphs, fallback_random):
    """Inference attention (``dropout_p=0``, as Hugging Face models call SDPA in evaluation) is
    tagged as a seeded op but draws nothing: it takes no key, so the compiled call advances
    torch's generator no more than eager does, and stays in the kernel under ``fallback_random``."""
    q = torch.randn(1, 2, 5, 4)
    fn = compiled(
        lambda t: F.scaled_dot_product_attention(t, t, t, is_causal=True),
        fallback_random=fallback_random,
    )
    keys, host_ops = (
        nkipy_core.cache_stats["random_keys"],
        nkipy_core.cache_stats["host_random_ops"],
    )
    torch.manual_seed(0)
    out = fn(q)
    after = torch.rand(4)
    torch.manual_seed(0)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, q, q, is_causal=True))
    assert torch.equal(after, torch.rand(4))
    assert (
        nkipy_core.cache_stats["random_keys"] == keys
        and nkipy_core.cache_stats["host_random_ops"] == host_ops
    )
    assert [sum(isinstance(m, KernelCall) for m in g.children()) for g in graphs] == [1]


# -- inverse-CDF distributions and RReLU's noise ----------------------------------------------------


def exponential_cdf(rate):
    return lambda x: 1 - torch.exp(-rate * x.clamp(min=0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exponential_follows_its_rate(dtype):
    torch.manual_seed(0)
    rate = 2.0
    e = compiled(lambda x: x.exponential_(rate))(torch.zeros(N, dtype=dtype))
    assert e.dtype == dtype and e.min() >= 0 and torch.isfinite(e).all()
    assert_moments(e, 1 / rate, 1 / rate**2, 9 / rate**4)
    assert_ks(e, exponential_cdf(rate))


def test_cauchy_has_its_median_and_scale_and_stays_finite():
    torch.manual_seed(0)
    median, sigma = 1.5, 0.5
    c = compiled(lambda x: x.cauchy_(median, sigma))(torch.zeros(N))
    assert torch.isfinite(c).all()
    assert_ks(c, lambda x: 0.5 + torch.atan((x - median) / sigma) / math.pi)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_geometric_counts_trials_to_the_first_success(dtype):
    torch.manual_seed(0)
    p = 0.3
    g = compiled(lambda x: x.geometric_(p))(torch.zeros(N, dtype=dtype))
    assert g.dtype == dtype and g.min() >= 1 and torch.equal(g, g.round())
    assert_moments(g, 1 / p, (1 - p) / p**2, (1 - p) * (p**2 - 9 * p + 9) / p**4)
    for k in range(1, 6):  # the probability mass function, k trials: p (1 - p)^(k - 1)
        rate = p * (1 - p) ** (k - 1)
        assert abs((g == k).double().mean().item() - rate) < 5 * math.sqrt(rate * (1 - rate) / N)


def test_log_normal_is_the_exponential_of_a_normal():
    torch.manual_seed(0)
    mean, std = 0.5, 0.75
    v = compiled(lambda x: x.log_normal_(mean, std))(torch.zeros(N))
    assert v.min() > 0
    assert_ks(v.log(), normal_cdf(mean, std))


def test_rrelu_in_training_draws_a_uniform_slope_per_negative_element():
    torch.manual_seed(0)
    lower, upper = 0.1, 0.4
    x = torch.cat([-torch.rand(N) - 0.5, torch.rand(N // 4)]).requires_grad_()
    y = compiled(lambda v: F.rrelu(v, lower, upper, training=True))(x)
    negative = x.detach() <= 0
    assert torch.equal(y[~negative], x.detach()[~negative])
    slopes = (y.detach() / x.detach())[negative]
    assert slopes.min() >= lower and slopes.max() < upper
    assert_ks(slopes, uniform_cdf(lower, upper))
    y.sum().backward()  # the gradient is the slope the forward drew
    torch.testing.assert_close(x.grad[negative], slopes)
    assert torch.equal(x.grad[~negative], torch.ones(N // 4))


def test_rrelu_in_eval_is_leaky_relu_with_the_mean_slope():
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 3.0, -math.inf, math.nan]).requires_grad_()
    y = compiled(lambda v: F.rrelu(v, 0.1, 0.3, training=False))(x)
    torch.testing.assert_close(y, F.leaky_relu(x.detach(), 0.2), equal_nan=True)
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([0.2, 0.2, 0.2, 1, 1, 0.2, 0.2]))
