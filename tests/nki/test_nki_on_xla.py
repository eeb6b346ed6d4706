"""On the xla runtime an NKI op cannot be inside a kernel (XLA has no NKI): it runs as torch, on the
interpreter, with a warning that says why; the RMSNorm pass stays out. Run by the tox ``xla`` env."""

from __future__ import annotations

import warnings

import pytest
import torch

import nkipy_core

pytest.importorskip("jax", reason="the xla runtime needs the nkipy-runtime[xla] extra (jax, jaxlib)")

from test_ops import nki_add  # noqa: E402,F401 - defines nkitest::add
from test_overrides import LlamaRMSNorm  # noqa: E402


def _on_xla(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(fn, backend="nkipy", fullgraph=True, options={"runtime": "xla"})(*args)
    return out, [str(w.message) for w in caught if issubclass(w.category, nkipy_core.FallbackWarning)]


def test_an_nki_op_runs_between_kernels_with_the_reason():
    a, b = torch.randn(128, 512), torch.randn(128, 512)
    out, fallbacks = _on_xla(lambda a, b: a * b * torch.ops.nkitest.add(a, b), a, b)
    torch.testing.assert_close(out, a * b * (a + b))
    assert len(fallbacks) == 1
    assert "nkitest::add.default" in fallbacks[0]
    assert "the xla runtime runs no custom calls to AwsNeuronCustomNativeKernel inside kernels" in fallbacks[0]


def test_softmax_and_rmsnorm_stay_with_the_base_rules():
    module, x = LlamaRMSNorm(64), torch.randn(8, 64)
    with torch.no_grad():
        out, fallbacks = _on_xla(lambda h: torch.softmax(module(h), -1), x)
        torch.testing.assert_close(out, torch.softmax(module(x), -1))
    assert fallbacks == []
