"""Tests of the example pack: the rule as NumPy, the rule compiled, and PyTorch's OpInfos."""

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nkipy_ops_example.plugin import softplus

from nkipy_core import FallbackWarning


def test_rule_is_numpy_code():
    """Given NumPy arrays, a rule runs as plain NumPy: no compiler, no torch.compile."""
    x = np.linspace(-30, 30, 101, dtype=np.float32)
    expected = F.softplus(torch.from_numpy(x), beta=0.5).numpy()
    np.testing.assert_allclose(softplus(None, x, beta=0.5), expected, rtol=1e-6)


def test_compiles_into_one_kernel(tmp_path):
    fn = torch.compile(F.softplus, backend="nkipy", options={"nkipy_cache": str(tmp_path)})
    x = torch.randn(4, 8) * 10
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # every op must be lowered
        torch.testing.assert_close(fn(x), F.softplus(x))
    (kernel,) = tmp_path.glob("kernels/*/kernel.py")
    assert "aten::softplus.default via nkipy_ops_example.plugin.softplus" in kernel.read_text()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_beta_threshold_and_half_floats(tmp_path, dtype):
    fn = torch.compile(
        lambda x: F.softplus(x, beta=2.0, threshold=5.0),
        backend="nkipy",
        options={"nkipy_cache": str(tmp_path)},
    )
    x = (torch.randn(4, 8) * 5).to(dtype)
    torch.testing.assert_close(fn(x), F.softplus(x, beta=2.0, threshold=5.0))


def test_conformance_with_pytorch_opinfos(nkipy_conformance):
    """PyTorch's OpInfos for every op the pack lowers, fp32 and bf16, forward and backward (the
    ``nkipy_conformance`` fixture comes from nkipy-core's pytest plugin)."""
    nkipy_conformance("nkipy-ops-example")
