"""The pack's NKI overrides: softmax outranks nkipy-ops-base and falls through to it for shapes
its kernel does not tile; RMSNorm is fused by a graph pass where the runtime runs the custom call;
both match eager on the OpInfo conformance harness."""

from __future__ import annotations

import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from nkipy_cli import run_json

import nkipy_core
from nkipy_core.plugin import manager as plugins
from nkipy_core.testing import OpCase, assert_conformance, load_op_db, run_case, run_conformance
from nkipy_ops_nki import plugin
from nkipy_ops_nki.kernels import softmax


def _compiled(fn, *args):
    """Run ``fn`` compiled on the cpu runtime: (output, fallback warnings, generated kernel sources)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(fn, backend="nkipy", fullgraph=True, options={"runtime": "cpu"})(*args)
    fallbacks = [
        str(w.message) for w in caught if issubclass(w.category, nkipy_core.FallbackWarning)
    ]
    sources = "".join(p.read_text() for p in Path.cwd().glob("nkipy_cache/kernels/*/kernel.py"))
    return out, fallbacks, sources


def test_nkipy_ops_list_shows_the_override_and_what_it_overrides(capsys):
    rows = {r["op"]: r for r in run_json(capsys, "list", "--pack", "nkipy-ops-nki")["lowerings"]}
    row = rows["aten::_softmax.default"]
    assert row["priority"] == 10 and row["provider"] == "nkipy-ops-nki"
    assert [o["provider"] for o in row["overridden"]] == ["nkipy-ops-base"]


@pytest.mark.parametrize("shape", [(4, 7, 33), (300, 64)])
def test_softmax_over_the_last_dimension_is_the_nki_kernel(shape):
    x = torch.randn(shape)
    out, fallbacks, sources = _compiled(lambda x: torch.softmax(x, -1) * 2, x)
    torch.testing.assert_close(out, torch.softmax(x, -1) * 2)
    assert fallbacks == [] and ":softmax_kernel#" in sources


@pytest.mark.parametrize("case", ["another dimension", "a row too wide for SBUF"])
def test_what_the_kernel_does_not_tile_falls_through_to_the_base_rule(case):
    x, dim = (
        (torch.randn(6, 5), 0)
        if case == "another dimension"
        else (torch.randn(2, softmax.MAX_COLS + 1), -1)
    )
    out, fallbacks, sources = _compiled(lambda x: torch.softmax(x, dim), x)
    torch.testing.assert_close(out, torch.softmax(x, dim))
    assert fallbacks == [] and "softmax_kernel" not in sources and "np.exp(" in sources


def test_softmax_conforms_forward_and_backward_in_fp32_and_bf16():
    report = run_conformance(
        "nkipy-ops-nki",
        include={"softmax", "nn.functional.softmax"},
        dtypes=(torch.float32, torch.bfloat16),
        max_samples=3,
    )
    print(report.table())
    assert {(r.op, r.dtype) for r in report.rows} >= {
        ("softmax", "float32"),
        ("softmax", "bfloat16"),
    }
    assert_conformance(report, allow_fallback=False, allow_skip=False)


class LlamaRMSNorm(torch.nn.Module):
    """As transformers writes it, in fp32."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, h):
        var = h.pow(2).mean(-1, keepdim=True)
        return self.weight * (h * torch.rsqrt(var + 1e-6))


@pytest.mark.parametrize("norm", ["LlamaRMSNorm", "F.rms_norm"])
def test_rmsnorm_is_fused_into_the_nki_op_in_inference(norm):
    module = LlamaRMSNorm(48)
    fn = module if norm == "LlamaRMSNorm" else (lambda h: F.rms_norm(h, (48,), module.weight, 1e-6))
    x = torch.randn(3, 50, 48)
    with torch.no_grad():
        out, fallbacks, sources = _compiled(lambda h: fn(h) + 1, x)
        torch.testing.assert_close(out, fn(x) + 1)
    assert fallbacks == [] and ":rmsnorm_kernel#" in sources


def test_a_training_graph_keeps_the_pattern_for_its_backward():
    module, x = LlamaRMSNorm(32), torch.randn(4, 32, requires_grad=True)
    out, fallbacks, sources = _compiled(module, x)
    out.sum().backward()
    expected = torch.autograd.grad(module(x).sum(), x)[0]
    torch.testing.assert_close(x.grad, expected)
    assert fallbacks == [] and "rmsnorm_kernel" not in sources


def test_the_pass_stays_out_on_a_runtime_that_cannot_run_the_custom_call():
    no_custom_calls = types.SimpleNamespace(name="xla")
    assert plugin.nkipy_graph_passes(stage="aten", runtime=no_custom_calls) is None
    assert plugin.nkipy_graph_passes(
        stage="aten", runtime=types.SimpleNamespace(host_custom_calls=True)
    )


def test_rmsnorm_conforms_on_the_opinfo_samples():
    opinfo = next(o for o in load_op_db() if o.full_name == "nn.functional.rms_norm")
    case = OpCase("nn.functional.rms_norm", ("nkipy_nki::rms_norm.default",), opinfo)
    row = run_case(case, dtype=torch.float32, max_samples=4, search_samples=8)
    assert row.status == "pass", row
    assert_conformance(row, allow_fallback=False)


@pytest.mark.parametrize("setting", [None, "0"], ids=["unset", "0"])
def test_without_nkipy_nki_overrides_1_softmax_and_rmsnorm_stay_with_the_base_rules(
    monkeypatch, setting
):
    monkeypatch.delenv("NKIPY_NKI_OVERRIDES", raising=False)
    if setting is not None:
        monkeypatch.setenv("NKIPY_NKI_OVERRIDES", setting)
    plugins.reload()
    try:
        module, x = LlamaRMSNorm(64), torch.randn(8, 64)
        with torch.no_grad():
            out, fallbacks, sources = _compiled(lambda h: torch.softmax(module(h), -1), x)
            torch.testing.assert_close(out, torch.softmax(module(x), -1))
        assert fallbacks == [] and "_kernel#" not in sources
    finally:
        monkeypatch.undo()
        plugins.reload()


def test_a_kernel_file_with_an_nki_custom_call_runs_on_its_own():
    x = torch.randn(4, 7, 33)
    _compiled(lambda x: torch.softmax(x, -1) * 2, x)
    (path,) = Path.cwd().glob("nkipy_cache/kernels/*/kernel.py")
    result = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["float32", "(4,", "7,", "33)"]


def test_the_overrides_switch_is_a_declared_flag(monkeypatch):
    from nkipy_core.config import env
    from nkipy_ops_nki import plugin

    assert {v.name: v for v in env.table()}["NKIPY_NKI_OVERRIDES"].owner == "nkipy-ops-nki"
    monkeypatch.setenv("NKIPY_NKI_OVERRIDES", "0")
    assert plugin.overrides_enabled() is False
    monkeypatch.setenv("NKIPY_NKI_OVERRIDES", "2")
    with pytest.raises(nkipy_core.ConfigurationError, match="NKIPY_NKI_OVERRIDES='2'"):
        plugin.overrides_enabled()
