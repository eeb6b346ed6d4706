"""On the xla runtime an NKI op cannot be inside a kernel (XLA has no NKI): it runs as torch, on the
interpreter, with a warning that says why; the RMSNorm pass stays out. Run by the tox ``xla`` env."""

from __future__ import annotations

import warnings

import pytest
import torch

import nkipy_core

pytest.importorskip(
    "jax", reason="the xla runtime needs the nkipy-runtime[xla] extra (jax, jaxlib)"
)

from nki_tutorial import tensor_add_kernel  # noqa: E402

from nkipy_ops_nki import NKIOpRegistry  # noqa: E402

add_kernel = NKIOpRegistry.register("xlatest::add")(tensor_add_kernel)


@torch.library.custom_op("xlatest::add", mutates_args=())
def nki_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return add_kernel(a, b)


nki_add.register_fake(lambda a, b: torch.empty_like(a))


def rms_norm(h, weight):
    """As LlamaRMSNorm writes it, in fp32: the pattern nkipy-ops-nki fuses where it can."""
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6))


def _on_xla(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(fn, backend="nkipy", fullgraph=True, options={"runtime": "xla"})(*args)
    return out, [
        str(w.message) for w in caught if issubclass(w.category, nkipy_core.FallbackWarning)
    ]


def test_an_nki_op_runs_between_kernels_with_the_reason():
    a, b = torch.randn(128, 512), torch.randn(128, 512)
    out, fallbacks = _on_xla(lambda a, b: a * b * torch.ops.xlatest.add(a, b), a, b)
    torch.testing.assert_close(out, a * b * (a + b))
    assert len(fallbacks) == 1
    assert "xlatest::add.default" in fallbacks[0]
    assert (
        "the xla runtime runs no custom calls to AwsNeuronCustomNativeKernel inside kernels"
        in fallbacks[0]
    )


def test_softmax_and_rmsnorm_stay_with_the_base_rules():
    x, weight = torch.randn(8, 64), torch.rand(64) + 0.5
    with torch.no_grad():
        out, fallbacks = _on_xla(lambda h: torch.softmax(rms_norm(h, weight), -1), x)
        torch.testing.assert_close(out, torch.softmax(rms_norm(x, weight), -1))
    assert fallbacks == []
