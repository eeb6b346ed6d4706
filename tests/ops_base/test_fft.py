"""Fourier transforms and complex arithmetic in kernels: compiled in strict mode (no CPU
fallback) against eager, the length limit of the DFT matrices, and complex RoPE fused with the
attention around it."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
import torchtitan_rope

from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.errors import Unsupported
from nkipy_ops_base import dft


def strict(fn, runtime="cpu"):
    torch._dynamo.reset()
    return torch.compile(fn, backend="nkipy", options={"strict": True, "runtime": runtime})


def signal(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("n", "norm"),
    [(1, None), (2, "forward"), (7, "ortho"), (16, None), (300, "ortho"), (1024, "forward")],
    ids=str,
)
def test_one_dimensional_transforms_match_eager(n, norm):
    """Direct lengths and split ones (past ``dft.DIRECT``: 300 = 15·20, 1024 = 32·32)."""
    x, z = signal(2, n), signal(2, n, dtype=torch.complex64, seed=1)
    rtol = atol = 2e-6 * math.sqrt(n) * (1 if norm else math.sqrt(n))
    cases = {
        "fft": (torch.fft.fft, z),
        "ifft": (torch.fft.ifft, z),
        "rfft": (torch.fft.rfft, x),
        "irfft": (torch.fft.irfft, z[:, : n // 2 + 1]),
        "hfft": (torch.fft.hfft, z[:, : n // 2 + 1]),
        "ihfft": (torch.fft.ihfft, x),
    }
    for name, (fn, arg) in cases.items():
        if name in ("irfft", "hfft") and n == 1:
            continue  # torch needs at least one output: n = 2(m - 1) is 0
        want = fn(arg, norm=norm)
        got = strict(lambda a, fn=fn: fn(a, norm=norm))(arg)
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=name)


def test_multidimensional_transforms_with_sizes_match_eager():
    x, z = signal(3, 6, 5), signal(3, 6, 5, dtype=torch.complex64, seed=1)
    cases = [
        (lambda a: torch.fft.fftn(a, s=(4, 8), dim=(0, 2)), z),
        (lambda a: torch.fft.ifft2(a, norm="ortho"), z),
        (lambda a: torch.fft.rfftn(a, norm="forward"), x),
        (lambda a: torch.fft.irfftn(a, s=(3, 6, 9)), z),
        (lambda a: torch.fft.hfft2(a, s=(5, 7)), z),
        (lambda a: torch.fft.ihfftn(a, dim=(0, 1)), x),
        (lambda a: torch.fft.fftshift(torch.fft.fft2(a)), x),
    ]
    for fn, arg in cases:
        torch.testing.assert_close(strict(fn)(arg), fn(arg), rtol=1e-5, atol=1e-5)


def test_gradients_and_stft_match_eager():
    x = signal(2, 40)
    window = torch.hann_window(16)

    def spectrogram(a):
        return torch.stft(a, 16, hop_length=4, window=window, return_complex=True).abs().sum()

    def round_trip(a):
        spec = torch.stft(a, 16, hop_length=4, window=window, return_complex=True)
        return torch.istft(spec, 16, hop_length=4, window=window, length=40)

    for fn in (spectrogram, lambda a: torch.fft.irfft(torch.fft.rfft(a) * 2, n=40).sum()):
        eager, compiled = x.clone().requires_grad_(), x.clone().requires_grad_()
        fn(eager).backward()
        strict(fn)(compiled).backward()
        torch.testing.assert_close(compiled.grad, eager.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(strict(round_trip)(x), round_trip(x), rtol=1e-5, atol=1e-5)


def test_edge_values_spread_as_in_eager():
    """A NaN reaches every output it enters; zeros and large values transform exactly or to
    within rounding. An infinity meets the matrix's zero entries too (``inf · 0`` is NaN), so
    its outputs are non-finite where pocketfft's may be ``inf + 0j``: the documented limit."""
    x = torch.tensor(
        [[0.0, 0.0, 0.0, 0.0], [math.nan, 1, 2, 3], [1e30, -1e30, 3e29, 0], [-0.0] * 4]
    )
    got, want = strict(torch.fft.rfft)(x), torch.fft.rfft(x)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0, equal_nan=True)
    lone = torch.tensor([math.inf, 0.0, 0.0, 0.0])
    got = strict(torch.fft.fft)(lone)
    assert torch.isinf(got.real).all() and not torch.isfinite(got).any()


def test_a_length_with_a_large_prime_factor_is_declined():
    """1031 is prime and above ``dft.MAX_FACTOR``: no split, and too long for one matrix."""
    for n in (1031, 2 * 1031):
        with pytest.raises(Unsupported, match=f"length {n}, whose prime factor 1031 > 1024"):
            dft.check_length(n)
    dft.check_length(2**16)  # splits into factors of 256
    z = signal(2 * 1031, dtype=torch.complex64)
    with pytest.warns(UserWarning, match="_fft_c2c.*prime factor 1031"):
        torch._dynamo.reset()
        got = torch.compile(torch.fft.fft, backend="nkipy")(z)
    torch.testing.assert_close(got, torch.fft.fft(z))


def test_complex_division_and_products_match_eager():
    a = torch.tensor([1 + 2j, -3 + 0.5j, 1e30 + 1e30j, 0j, 1 + 1j], dtype=torch.complex64)
    b = torch.tensor([2 - 1j, 1e-30 + 1e30j, 1e30 - 1e30j, 1 + 0j, 0j], dtype=torch.complex64)
    torch.testing.assert_close(strict(torch.div)(a, b), a / b, equal_nan=True)
    m, k = signal(3, 4, dtype=torch.complex64), signal(4, 2, dtype=torch.complex64, seed=1)
    torch.testing.assert_close(strict(torch.mm)(m, k), m @ k)
    torch.testing.assert_close(strict(torch.angle)(a), torch.angle(a))
    r = torch.tensor([-2.0, 0.0, -0.0, 3.0, math.nan])
    torch.testing.assert_close(strict(torch.angle)(r), torch.angle(r), equal_nan=True)


def test_complex_exp_log_pow_reciprocal_mean_addmm_match_eager():
    z = torch.tensor(
        [1 + 2j, -3 + 0.5j, 0j, -2 + 0j, 40 + 3j, 0.5 - 1e-3j, 1e-20 + 1e-20j],
        dtype=torch.complex64,
    )
    w = torch.tensor(
        [0.5 + 0.5j, 2 + 0j, 1 + 0j, -1 + 1j, 0.1j, 3 - 1j, 1 + 0j], dtype=torch.complex64
    )
    cases = [
        (torch.exp, (z,)),
        (torch.log, (z[z != 0],)),
        (torch.reciprocal, (z[z != 0],)),
        (torch.square, (z,)),
        (lambda a: a**3, (z,)),
        (lambda a, b: a**b, (z[z != 0], w[z != 0])),
        (lambda a: a**0.5, (z,)),
        (lambda a: a.mean(0), (z,)),
        (
            torch.addmm,
            tuple(
                signal(*s, dtype=torch.complex64, seed=i)
                for i, s in enumerate(((2, 3), (2, 4), (4, 3)))
            ),
        ),
        (lambda a: torch.exp(a), (signal(0, 3, dtype=torch.complex64),)),
    ]
    for fn, args in cases:
        torch.testing.assert_close(strict(fn)(*args), fn(*args), rtol=2e-5, atol=1e-5)
    inf = torch.tensor([complex(math.inf, 0), complex(-math.inf, 0)], dtype=torch.complex64)
    torch.testing.assert_close(strict(torch.exp)(inf), torch.exp(inf))


class RotaryAttention(torch.nn.Module):
    """A Llama attention block: projections, complex RoPE (Meta's ``view_as_complex`` of pairs
    times ``freqs_cis``, ``view_as_real``, flatten), causal attention, output projection."""

    def __init__(self, dim=16, heads=2, max_seqlen=8):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.heads, self.head_dim = heads, dim // heads
        self.wqkv = torch.nn.Parameter(torch.randn(3 * dim, dim, generator=g) / 4)
        self.wo = torch.nn.Parameter(torch.randn(dim, dim, generator=g) / 4)
        self.rotary = torchtitan_rope.Rotary(self.head_dim, max_seqlen)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (t.view(b, s, self.heads, self.head_dim) for t in (x @ self.wqkv.T).chunk(3, -1))
        q, k = self.rotary(q, k)
        out = F.scaled_dot_product_attention(
            *(t.transpose(1, 2) for t in (q, k, v)), is_causal=True
        )
        return out.transpose(1, 2).reshape(b, s, -1) @ self.wo.T


@pytest.mark.parametrize("runtime", ["cpu", "xla"])
def test_complex_rope_compiles_into_the_attention_kernel(runtime, graphs):
    """Forward and backward are one kernel each: the complex views and product are real
    arithmetic inside the attention kernel, nothing on CPU. The xla case runs where
    nkipy-runtime[xla] is installed (tox env xla)."""
    if runtime == "xla":
        pytest.importorskip("nkipy_runtime.xla_runtime", reason="the xla runtime is not installed")
        pytest.importorskip("jax", reason="the xla runtime needs nkipy-runtime[xla]")
    model, x = RotaryAttention(), signal(2, 6, 16)
    eager_x, compiled_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    model(eager_x).square().sum().backward()
    want = [eager_x.grad, *(p.grad.clone() for p in model.parameters())]
    model.zero_grad()
    strict(model, runtime)(compiled_x).square().sum().backward()
    got = [compiled_x.grad, *(p.grad for p in model.parameters())]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert [sum(isinstance(m, KernelCall) for m in gm.children()) for gm in graphs] == [1, 1]
