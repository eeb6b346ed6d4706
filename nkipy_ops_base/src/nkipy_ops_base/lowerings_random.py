"""Random ops: uniform, normal, Bernoulli, dropout, ``randint``, ``randperm``, the inverse-CDF
distributions (exponential, Cauchy, geometric, log-normal), ``multinomial`` and RReLU's noise,
from random bits.

Every rule turns the node's u32 Philox words (``ctx.random_bits``, see
``nkipy_core.compiler.rng``) into its distribution: uniform floats keep the top ``d`` bits of a
word, ``d`` the precision of the dtype (24 for f32; two words give 53 for f64), scaled by
``2**-d``, so they are exact multiples of ``2**-d`` in ``[0, 1)`` like torch's; normals are
Box-Muller over two uniforms; Bernoulli and dropout compare a uniform with ``p``; integers take a
word modulo the range, one u32 word when every value fits int32 and two words as a u64 beyond;
``randperm`` argsorts 64-bit random keys; ``multinomial`` inverts the running sum of the
weights with replacement and races exponential clocks without; exponential, Cauchy and geometric
values apply torch's inverse CDFs (``ATen/core/TransformationHelper.h``) to one uniform,
log-normals exponentiate a normal. (Normals from 24-bit uniforms stay within 5.8 standard
deviations; f64 ones, from 53-bit uniforms, within 8.6.) Neuron has no 64-bit integer arithmetic
on trn1, so the u64 paths (f64 uniforms, wide ``randint``, ``randperm``) run on CPU there.

The numbers follow Philox, not torch's CPU generator: the ``fallback_random`` option gives
eager's numbers instead. A node that names its own ``generator`` is declined (it runs on CPU
with that generator).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from nkipy_core import knp
from nkipy_core.ir import DType

from .conventions import require
from .opmath import compute_dtype, opmath
from .rules import RULES

aten = torch.ops.aten

#: bits of a uniform value per dtype: its significand's precision, so every value is exact
_DIGITS = {DType.f16: 11, DType.bf16: 8, DType.f32: 24, DType.f64: 53}


def _no_generator(generator) -> None:
    require(generator is None, "an explicit torch.Generator (its numbers come from torch on CPU)")


def _words64(bits):
    """u64 values from pairs of u32 words along the leading axis of ``bits``. The high word is
    moved up by two multiplies by 2**16: Neuron refuses a u64 constant of 2**32 or more."""
    high, low = (knp.astype(bits[i], DType.u64) for i in (0, 1))
    step = np.uint64(1 << 16)
    return knp.add(knp.multiply(knp.multiply(high, step), step), low)


def _unit(bits, dtype: DType):
    """Uniform values of ``dtype`` in ``[0, 1)`` from u32 words (two per value, along the
    leading axis, for f64)."""
    digits = _DIGITS[dtype]
    if digits > 32:
        top = knp.floor_divide(_words64(bits), np.uint64(1 << (64 - digits)))
        unit = knp.multiply(knp.astype(top, DType.f64), 2.0**-digits)
        # never true in f64; where a Neuron target computes f64 in f32 (NKIPY_NEURON_F64=f32),
        # 53-bit values round up to 1.0, which [0, 1) excludes
        return knp.where(knp.greater_equal(unit, 1.0), 1.0 - 2.0**-24, unit)
    top = knp.floor_divide(bits, np.uint32(1 << (32 - digits)))
    return knp.astype(knp.multiply(knp.astype(top, DType.f32), 2.0**-digits), dtype)


def uniforms(ctx, shape, dtype: DType, count: int = 1) -> list:
    """``count`` independent arrays of uniform ``dtype`` values in ``[0, 1)``, one draw of the node."""
    words = 2 if dtype is DType.f64 else 1
    bits = ctx.random_bits((count, words, *shape))
    return [_unit(bits[i] if words == 2 else bits[i][0], dtype) for i in range(count)]


def standard_normal(ctx, shape, dtype: DType):
    """Box-Muller: ``sqrt(-2 log(1 - u1)) cos(2 pi u2)``, computed in f32 (f64 for f64)."""
    compute = DType.f64 if dtype is DType.f64 else DType.f32
    u1, u2 = uniforms(ctx, shape, compute, 2)
    radius = knp.sqrt(knp.multiply(knp.log(knp.subtract(1, u1)), -2))
    return knp.multiply(radius, knp.cos(knp.multiply(u2, 2 * math.pi)))


def _float_out(ctx) -> DType:
    require(
        ctx.out_dtype.is_float, f"a random {ctx.out_dtype.value} tensor of a float distribution"
    )
    return ctx.out_dtype


# -- uniform -------------------------------------------------------------------------------------


@RULES.register(aten.rand.default, aten.rand.generator)
def rand(ctx, size, *, generator=None, **_):
    _no_generator(generator)
    return uniforms(ctx, ctx.out.shape, _float_out(ctx))[0]


@RULES.register(aten.rand_like.default)
def rand_like(ctx, x, **_):
    return uniforms(ctx, ctx.out.shape, _float_out(ctx))[0]


@RULES.register(aten.uniform.default)
def uniform(ctx, x, low=0.0, high=1.0, *, generator=None):
    """``low + u (high - low)`` in opmath, as torch's ``uniform_``."""
    _no_generator(generator)
    dtype = _float_out(ctx)
    u = uniforms(ctx, ctx.out.shape, compute_dtype(dtype))[0]
    return knp.astype(knp.add(knp.multiply(u, high - low), low), dtype)


# -- normal --------------------------------------------------------------------------------------


@RULES.register(aten.randn.default, aten.randn.generator)
def randn(ctx, size, *, generator=None, **_):
    _no_generator(generator)
    dtype = _float_out(ctx)
    return knp.astype(standard_normal(ctx, ctx.out.shape, dtype), dtype)


@RULES.register(aten.randn_like.default)
def randn_like(ctx, x, **_):
    dtype = _float_out(ctx)
    return knp.astype(standard_normal(ctx, ctx.out.shape, dtype), dtype)


def _normal(ctx, mean, std):
    dtype = _float_out(ctx)
    z = standard_normal(ctx, ctx.out.shape, dtype)
    return opmath(dtype, lambda m, s: knp.add(m, knp.multiply(s, z)), mean, std)


@RULES.register(aten.normal.float_float)
def normal_float_float(ctx, mean, std, size, *, generator=None, **_):
    _no_generator(generator)
    return _normal(ctx, mean, std)


@RULES.register(aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor)
def normal(ctx, mean, std=1.0, *, generator=None):
    _no_generator(generator)
    return _normal(ctx, mean, std)


@RULES.register(aten.normal_functional.default)
def normal_functional(ctx, x, mean=0.0, std=1.0, *, generator=None):
    """``x.normal_(mean, std)`` after functionalization: ``x`` only gives the shape."""
    _no_generator(generator)
    return _normal(ctx, mean, std)


# -- Bernoulli and dropout ------------------------------------------------------------------------


def _bernoulli(ctx, p):
    """``u < p`` as the output dtype: 1 with probability ``p``."""
    dtype = DType.f64 if ctx.out_dtype is DType.f64 else DType.f32
    u = uniforms(ctx, ctx.out.shape, dtype)[0]
    return knp.astype(knp.less(u, p), ctx.out_dtype)


@RULES.register(aten.bernoulli.default)
def bernoulli(ctx, probabilities, *, generator=None):
    _no_generator(generator)
    return _bernoulli(ctx, probabilities)


@RULES.register(aten.bernoulli.p, aten.bernoulli.Tensor)
def bernoulli_p(ctx, x, p=0.5, *, generator=None):
    """``x.bernoulli_(p)`` after functionalization: ``x`` only gives the shape and dtype."""
    _no_generator(generator)
    return _bernoulli(ctx, p)


@RULES.register(aten.native_dropout.default)
def native_dropout(ctx, x, p, train):
    """Zero each element with probability ``p`` and scale the kept ones by ``1 / (1 - p)``;
    the boolean keep-mask is the second result, which the backward graph multiplies by."""
    if not train or p == 0:
        return x, knp.full(x.shape, True, DType.bool)
    if p == 1:
        return knp.zeros(x.shape, ctx.out_dtype), knp.full(x.shape, False, DType.bool)
    dtype = DType.f64 if ctx.out_dtype is DType.f64 else DType.f32
    keep = knp.greater_equal(uniforms(ctx, x.shape, dtype)[0], p)
    scale = 1.0 / (1.0 - p)
    out = opmath(ctx.out_dtype, lambda v: knp.where(keep, knp.multiply(v, scale), 0), x)
    return out, keep


# -- integers -------------------------------------------------------------------------------------


def _randint(ctx, low: int, high: int):
    """``low + w % (high - low)`` for a random word ``w``: a u32 word when every value fits int32
    (bias below ``range / 2**32``, all in 32-bit arithmetic, so it runs where 64-bit integers are
    cut to 32 bits), else a 64-bit word (which such a target refuses, so the op stays on CPU)."""
    require(high > low, f"randint with an empty range [{low}, {high})")
    span = high - low
    if -(1 << 31) <= low and high <= 1 << 31:
        bits = ctx.random_bits(ctx.out.shape)
        offset = bits if span == 1 << 32 else knp.remainder(bits, np.uint32(span))
    else:
        offset = knp.remainder(_words64(ctx.random_bits((2, *ctx.out.shape))), np.uint64(span))
    return knp.astype(knp.add(knp.astype(offset, DType.i64), np.int64(low)), ctx.out_dtype)


@RULES.register(aten.randint.default, aten.randint.generator)
def randint(ctx, high, size, *, generator=None, **_):
    _no_generator(generator)
    return _randint(ctx, 0, high)


@RULES.register(aten.randint.low, aten.randint.low_generator)
def randint_low(ctx, low, high, size, *, generator=None, **_):
    _no_generator(generator)
    return _randint(ctx, low, high)


@RULES.register(aten.randint_like.default)
def randint_like(ctx, x, high, **_):
    return _randint(ctx, 0, high)


@RULES.register(aten.randint_like.low_dtype)
def randint_like_low(ctx, x, low, high, **_):
    return _randint(ctx, low, high)


@RULES.register(aten.randperm.default, aten.randperm.generator)
def randperm(ctx, n, *, generator=None, **_):
    """The order that sorts ``n`` random 64-bit keys (a stable sort, so ties still permute)."""
    _no_generator(generator)
    keys = _words64(ctx.random_bits((2, n)))
    return knp.astype(knp.argsort(keys), ctx.out_dtype)


# -- inverse-CDF distributions ---------------------------------------------------------------------


def _unit_for(ctx):
    """One uniform per output element in ``[0, 1)``, in f32 (f64 for f64 outputs): torch draws
    these in double, but Neuron has no f64, so narrower outputs use f32's 24-bit uniforms."""
    compute = DType.f64 if ctx.out_dtype is DType.f64 else DType.f32
    return uniforms(ctx, ctx.out.shape, compute)[0], compute


@RULES.register(aten.exponential.default)
def exponential(ctx, x, lambd=1.0, *, generator=None):
    """``-log1p(-u) / lambda``, torch's CPU formula: ``u = 0`` gives 0, never infinity."""
    _no_generator(generator)
    dtype = _float_out(ctx)
    u, _ = _unit_for(ctx)
    return knp.astype(knp.multiply(knp.log1p(knp.negative(u)), -1.0 / lambd), dtype)


@RULES.register(aten.cauchy.default)
def cauchy(ctx, x, median=0.0, sigma=1.0, *, generator=None):
    """``median + sigma tan(pi (u - 1/2))`` with ``u`` clipped to ``[eps, 1 - eps]`` (``eps`` of
    the computing dtype), as torch clips it so that ``tan`` stays finite."""
    _no_generator(generator)
    dtype = _float_out(ctx)
    u, compute = _unit_for(ctx)
    eps = float(np.finfo(compute.numpy).eps)
    u = knp.minimum(knp.maximum(u, eps), 1.0 - eps)
    t = knp.tan(knp.multiply(knp.subtract(u, 0.5), math.pi))
    return knp.astype(knp.add(knp.multiply(t, sigma), median), dtype)


@RULES.register(aten.geometric.default)
def geometric(ctx, x, p, *, generator=None):
    """``ceil(log(u) / log1p(-p))``, the number of Bernoulli(``p``) trials up to the first success.

    torch's ``u = 0`` (probability ``2**-53`` in its doubles) gives infinity; here ``u`` is
    raised to the smallest positive uniform (``2**-24`` in f32), so every value is finite."""
    _no_generator(generator)
    require(0 < p < 1, f"geometric with p={p} outside (0, 1)")
    u, compute = _unit_for(ctx)
    u = knp.maximum(u, 2.0 ** -_DIGITS[compute])
    trials = knp.ceil(knp.divide(knp.log(u), math.log1p(-p)))
    return knp.astype(trials, ctx.out_dtype)


@RULES.register(aten.log_normal.default)
def log_normal(ctx, x, mean=1.0, std=2.0, *, generator=None):
    """``exp(mean + std z)`` for a standard normal ``z`` (Box-Muller, as ``randn``)."""
    _no_generator(generator)
    dtype = _float_out(ctx)
    z = standard_normal(ctx, ctx.out.shape, dtype)
    return knp.astype(knp.exp(knp.add(knp.multiply(z, std), mean)), dtype)


@RULES.register(aten.rrelu_with_noise_functional.default)
def rrelu_with_noise(ctx, x, noise, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    """Randomized leaky ReLU; returns the output and the new ``noise`` (the slope applied to each
    element, which the backward multiplies by). Training draws a slope uniform in
    ``[lower, upper)`` for each element ``<= 0`` (1 elsewhere); evaluation uses the mean slope
    ``(lower + upper) / 2`` and leaves ``noise`` as it was."""
    _no_generator(generator)
    dtype = _float_out(ctx)
    negative = knp.less_equal(x, 0)
    if not training:
        slope = (lower + upper) / 2
        return opmath(dtype, lambda v: knp.where(negative, knp.multiply(v, slope), v), x), noise
    compute = compute_dtype(dtype)
    u = uniforms(ctx, x.shape, compute)[0]
    slopes = knp.where(negative, knp.add(knp.multiply(u, upper - lower), lower), 1.0)
    out = knp.astype(knp.multiply(knp.astype(x, compute), slopes), dtype)
    return out, knp.astype(slopes, knp.dtype_of(noise))


@RULES.register(aten.rrelu_with_noise_backward.default)
def rrelu_with_noise_backward(ctx, grad, x, noise, lower, upper, training, self_is_result):
    """Training: the gradient times the slopes the forward drew (``noise``); evaluation: leaky
    ReLU's gradient with the mean slope (``x`` may be the result: its sign is the input's)."""
    if training:
        return opmath(ctx.out_dtype, knp.multiply, grad, noise)
    slope = (lower + upper) / 2
    positive = knp.greater(x, 0)
    return opmath(ctx.out_dtype, lambda g: knp.where(positive, g, knp.multiply(g, slope)), grad)


# -- multinomial -----------------------------------------------------------------------------------

#: most ``rows x samples x categories`` comparisons multinomial with replacement makes in a kernel
MULTINOMIAL_LIMIT = 1 << 24


@RULES.register(aten.multinomial.default)
def multinomial(ctx, weights, num_samples, replacement=False, *, generator=None):
    """Category indices drawn with probabilities proportional to each row of ``weights``.

    With replacement, a uniform ``u`` picks the number of running sums ``c_j`` of the weights
    with ``c_j <= u c_last`` (the inverse CDF; a zero weight adds an empty interval, so it is
    never picked); rounding that lands on ``c_last`` is held to the last nonzero category.
    Without replacement, category ``j`` gets an exponential clock ``E_j / w_j``
    (``E_j = -log(1 - u_j)``) and the ``num_samples`` earliest win in order: the race
    gives exactly the law of drawing one by one without replacement, and zero weights never
    ring. torch's checks of the values (negative, non-finite or all-zero rows, fewer nonzero
    weights than samples without replacement) need the data, so they are not made: such rows
    give some index. Computed in f32 (f64 for f64 weights)."""
    _no_generator(generator)
    dtype = knp.dtype_of(weights)
    require(dtype.is_float, f"multinomial of {dtype.value} weights")
    categories = weights.shape[-1]
    require(num_samples > 0 and categories > 0, "multinomial with no samples or no categories")
    compute = DType.f64 if dtype is DType.f64 else DType.f32
    rows = knp.reshape(knp.astype(weights, compute), (-1, categories))
    count = rows.shape[0]
    if replacement:
        size = count * num_samples * categories
        require(size <= MULTINOMIAL_LIMIT, f"multinomial with {size} comparisons")
        sums = knp.cumsum(rows, axis=1)
        total = sums[:, -1:]
        u = uniforms(ctx, (count, num_samples, 1), compute)[0]
        below = knp.less_equal(knp.expand_dims(sums, 1), knp.multiply(u, knp.expand_dims(total, 1)))
        picked = knp.sum(knp.astype(below, DType.i64), -1)
        last = knp.sum(knp.astype(knp.less(sums, total), DType.i64), -1, keepdims=True)
        picked = knp.minimum(picked, last)
    else:
        require(
            num_samples <= categories,
            f"multinomial of {num_samples} samples from {categories} categories without replacement",
        )
        u = uniforms(ctx, (count, categories), compute)[0]
        clocks = knp.divide(knp.negative(knp.log1p(knp.negative(u))), rows)
        clocks = knp.where(knp.greater(rows, 0), clocks, math.inf)
        picked = knp.argsort(clocks, axis=1)[:, :num_samples]
    return knp.astype(knp.reshape(picked, ctx.out.shape), ctx.out_dtype)
