"""Complex tensors with nkipy-core alone: they live on the device, and every op on them runs on
CPU with a warning (no pack gives a rule registered for complex nodes), the conjugate and
negative bits of their views honoured."""

from __future__ import annotations

import pytest
import torch

from nkipy_core import FallbackWarning


def test_complex_ops_run_on_cpu_with_a_warning_and_the_right_values(plugin_env):
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, dtype=torch.complex64, generator=g)
    w = torch.randn(3, dtype=torch.complex64, generator=g)
    d, e = z.to("nkipy"), w.to("nkipy")
    assert torch.equal(d.cpu(), z)
    with pytest.warns(FallbackWarning, match=r"aten::mul\.Tensor runs on CPU"):
        product = d.conj() * e
    torch.testing.assert_close(product.cpu(), z.conj() * w)
    with pytest.warns(FallbackWarning, match=r"aten::neg\.default runs on CPU"):
        negated = d.conj().imag.clone()  # the negative bit resolved by a negation
    assert torch.equal(negated.cpu(), z.conj().imag)


def test_a_compiled_complex_graph_runs_on_cpu_with_a_warning(plugin_env):
    z = torch.randn(4, dtype=torch.complex64)
    with pytest.warns(FallbackWarning, match="no installed pack lowers it"):
        out = torch.compile(lambda a: torch.view_as_real(a * a), backend="nkipy")(z.to("nkipy"))
    torch.testing.assert_close(out.cpu(), torch.view_as_real(z * z))
