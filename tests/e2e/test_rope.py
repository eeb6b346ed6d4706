"""TorchTitan's rotary embeddings, complex ``freqs_cis`` buffer and all, through
``torch.compile(backend="nkipy")``: forward and backward lower into one kernel per graph (the
complex values carried as real pairs), with no op on CPU, and match eager CPU."""

from __future__ import annotations

import pytest
import torch
import torchtitan_rope

from nkipy_core.compiler.kernel_call import KernelCall

TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("device", ["cpu", "nkipy"])
def test_rotary_embedding_is_one_kernel_per_graph_and_matches_eager(device, dtype, graphs):
    rotary = torchtitan_rope.Rotary(8, 16)
    xq, xk = (t.to(dtype) for t in torchtitan_rope.inputs())
    grads = [
        torch.randn(xq.shape, generator=torch.Generator().manual_seed(i)).to(dtype) for i in (1, 2)
    ]

    eager = [t.clone().requires_grad_() for t in (xq, xk)]
    expected = rotary(*eager)
    torch.autograd.backward(expected, grads)

    compiled_rotary = torch.compile(rotary.to(device), backend="nkipy", options={"strict": True})
    inputs = [t.clone().to(device).requires_grad_() for t in (xq, xk)]
    actual = compiled_rotary(*inputs)
    torch.autograd.backward(actual, [g.to(device) for g in grads])

    rtol, atol = TOLERANCE[dtype]
    for got, want in zip(
        (*actual, *(t.grad for t in inputs)), (*expected, *(t.grad for t in eager))
    ):
        assert got.device.type == device
        torch.testing.assert_close(got.detach().cpu(), want, rtol=rtol, atol=atol)
    assert [sum(isinstance(m, KernelCall) for m in gm.children()) for gm in graphs] == [1, 1]


@pytest.mark.parametrize("device", ["cpu", "nkipy"])
def test_graph_inputs_with_the_conjugate_or_negative_bit_are_read_as_their_values(device):
    """``x.conj()`` and ``x.conj().imag`` are views whose memory holds other values than they
    read; dynamo guards the bits, and a kernel taking such an input gets it resolved."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4, dtype=torch.complex64, generator=g)
    w = torch.randn(4, dtype=torch.complex64, generator=g)
    f = torch.compile(lambda a, b: a * b, backend="nkipy", options={"strict": True})
    zd, wd = z.to(device), w.to(device)
    torch.testing.assert_close(f(zd, wd).cpu(), z * w)
    torch.testing.assert_close(f(zd.conj(), wd).cpu(), z.conj() * w)
    torch.testing.assert_close(f(zd.real, wd.conj().imag).cpu(), z.real * w.conj().imag)
