"""Complex tensors on the nkipy device, eagerly: storage, views sharing it, the conjugate and
negative bits, and complex ops against CPU torch.

A complex tensor's buffer holds interleaved real and imaginary parts, as on CPU; runtimes and
kernels see its real view. The ops the packs lower for complex tensors run as kernels (no
``FallbackWarning``); others run on CPU with a warning naming them.
"""

from __future__ import annotations

import io
import warnings

import pytest
import torch
import torchtitan_rope

from nkipy_core import FallbackWarning

COMPLEX = [torch.complex64, torch.complex128]


def _z(*shape, dtype=torch.complex64, seed=0):
    return torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def no_fallback():
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        yield


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_tensors_move_to_the_device_and_back(dtype, no_fallback):
    z = _z(3, 4, dtype=dtype)
    d = z.to("nkipy")
    assert (d.device.type, d.dtype, d.shape) == ("nkipy", dtype, z.shape)
    assert torch.equal(d.cpu(), z)
    assert d.tolist() == z.tolist() and d[1, 2].item() == z[1, 2].item()
    e = torch.empty(3, 4, dtype=dtype, device="nkipy")
    e.copy_(z)
    assert torch.equal(e.cpu(), z)
    assert torch.equal(
        torch.zeros(2, dtype=dtype, device="nkipy").cpu(), torch.zeros(2, dtype=dtype)
    )


def test_printing_shows_the_values(no_fallback):
    z = torch.tensor([1.5 - 2j, 0.25j])
    assert repr(z.to("nkipy")) == repr(z)[:-1] + ", device='nkipy:0')"


def test_save_and_load_keep_values_and_shared_storage(no_fallback):
    d = _z(2, 3).to("nkipy")
    buffer = io.BytesIO()
    torch.save({"all": d, "rows": d[1:]}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["all"].device.type == "nkipy" and torch.equal(loaded["all"].cpu(), d.cpu())
    assert loaded["rows"].untyped_storage().data_ptr() == loaded["all"].untyped_storage().data_ptr()
    buffer.seek(0)
    assert torch.equal(torch.load(buffer, map_location="cpu")["all"], d.cpu())


def test_a_complex_buffer_moves_with_its_module(no_fallback):
    rotary = torchtitan_rope.Rotary(8, 16)
    expected = rotary.freqs_cis.clone()
    rotary.to("nkipy")
    assert rotary.freqs_cis.device.type == "nkipy"
    assert torch.equal(rotary.freqs_cis.cpu(), expected)


def test_view_as_real_and_view_as_complex_share_the_buffer(no_fallback):
    z = _z(2, 3)
    d = z.to("nkipy")
    real = torch.view_as_real(d)
    assert real.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    real[0, 1, 1] = 7.0  # a write through the real view is a write of the imaginary part
    z[0, 1] = complex(z[0, 1].real.item(), 7.0)
    assert torch.equal(d.cpu(), z)

    x = torch.randn(4, 2)
    xd = x.to("nkipy")
    torch.view_as_complex(xd).mul_(2j)
    torch.view_as_complex(x).mul_(2j)
    assert torch.equal(xd.cpu(), x)


def test_real_and_imag_are_views(no_fallback):
    z = _z(2, 3)
    d = z.to("nkipy")
    assert torch.equal(d.real.cpu(), z.real) and torch.equal(d.imag.cpu(), z.imag)
    d.imag.mul_(-1)
    d.real.add_(1)
    z.imag.mul_(-1)
    z.real.add_(1)
    assert torch.equal(d.cpu(), z)


def test_conjugate_and_negative_bits_are_honoured(no_fallback):
    z, w = _z(3, 3), _z(3, 3, seed=1)
    d, e = z.to("nkipy"), w.to("nkipy")
    assert d.conj().is_conj() and d.conj().imag.is_neg()
    assert torch.equal(d.conj().cpu(), z.conj())
    assert torch.equal(d.conj().imag.cpu(), z.conj().imag)
    assert torch.equal(d.conj().clone().cpu(), z.conj())
    assert torch.equal(d.conj().imag.clone().cpu(), z.conj().imag)
    torch.testing.assert_close((d.conj() * e).cpu(), z.conj() * w)
    # writes through a conjugate view store the conjugate
    target, expected = (
        torch.zeros(3, 3, dtype=torch.complex64, device="nkipy"),
        torch.zeros(3, 3, dtype=torch.complex64),
    )
    target.conj().copy_(e)
    expected.conj().copy_(w)
    assert torch.equal(target.cpu(), expected)
    target.conj().imag.copy_(d.real)
    expected.conj().imag.copy_(z.real)
    assert torch.equal(target.cpu(), expected)
    host = torch.zeros(3, 3, dtype=torch.complex64)
    host.conj().copy_(d)
    assert torch.equal(host, z.conj())


#: complex ops the packs lower, as eager calls on device tensors and on CPU ones
OPS = {
    "mul": lambda a, b: a * b,
    "mul_broadcast": lambda a, b: a * b[:1],
    "mul_real": lambda a, b: a * b.real,
    "mul_complex_scalar": lambda a, b: a * (0.5 - 2j),
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2j),
    "sub": lambda a, b: a - b,
    "sub_real": lambda a, b: b.real - a,
    "neg": lambda a, b: -a,
    "conj_physical": lambda a, b: torch.conj_physical(a),
    "abs": lambda a, b: a.abs(),
    "polar": lambda a, b: torch.polar(a.abs(), b.real),
    "complex": lambda a, b: torch.complex(a.real, b.imag),
    "where": lambda a, b: torch.where(a.real > 0, a, b),
    "sum": lambda a, b: a.sum(-1),
    "to_complex128": lambda a, b: a.to(torch.complex128),
    "from_real": lambda a, b: a.real.to(torch.complex64),
    "reshape_transposed": lambda a, b: a.t().reshape(-1),
    "flatten_unsqueeze": lambda a, b: a.flatten().unsqueeze(0),
    "slice_expand": lambda a, b: a[1:, :2].unsqueeze(0).expand(2, 2, 2).contiguous(),
    "cat": lambda a, b: torch.cat([a, b], -1),
    "full": lambda a, b: torch.full((2, 3), 1 - 1j, device=a.device),
}


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_op_matches_cpu_as_a_kernel(name, dtype, no_fallback):
    a, b = _z(3, 4, dtype=dtype), _z(3, 4, dtype=dtype, seed=1)
    expected = OPS[name](a, b)
    got = OPS[name](a.to("nkipy"), b.to("nkipy"))
    assert got.device.type == "nkipy" and got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected)


def test_a_complex_op_no_pack_lowers_runs_on_cpu_with_a_warning():
    z = _z(3)
    with pytest.warns(
        FallbackWarning,
        match=r"aten::sqrt\.default runs on CPU: no installed pack lowers it for complex tensors",
    ):
        got = torch.sqrt(z.to("nkipy"))
    torch.testing.assert_close(got.cpu(), torch.sqrt(z))


def test_rotary_embedding_forward_and_backward_match_cpu(no_fallback):
    """TorchTitan's ``apply_rotary_emb`` on device tensors, ``freqs_cis`` a device buffer."""
    rotary = torchtitan_rope.Rotary(8, 16)
    xq, xk = torchtitan_rope.inputs()
    results = []
    for device in ("cpu", "nkipy"):
        rotary.to(device)
        q, k = (t.clone().to(device).requires_grad_() for t in (xq, xk))
        out_q, out_k = rotary(q, k)
        (out_q.sum() + (out_k * out_k).sum()).backward()
        results.append([t.detach().cpu() for t in (out_q, out_k, q.grad, k.grad)])
    for got, want in zip(*reversed(results)):
        torch.testing.assert_close(got, want)
