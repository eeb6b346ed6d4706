"""TorchTitan's complex rotary embeddings (and its grouped MoE experts) emitted as HLO: Trainium has
no complex types, so kernels carry complex tensors as real pairs and no HLO of theirs holds a
``c64``/``c128`` type or anything else a Neuron target refuses.

The programs run on XLA (this test file's env, ``NKIPY_RUNTIME=xla``), compared with eager CPU,
and are compiled for every Neuron target by the STAND-IN compiler
(``tests/support/neuronx_cc_standin.py``; the real neuronx-cc is not run), whose HLO the profile
check reads again, as ``test_neuron_programs.py`` does.
"""

from __future__ import annotations

import re

import neuronx_cc_standin
import pytest
import torch
import torch.nn.functional as F
import torchtitan_rope

from nkipy_core import init_nkipy_backend
from nkipy_core.compiler import precompile
from nkipy_runtime.hlo_files import HLO_TEXT
from nkipy_runtime.neuron import profile_for, violations
from nkipy_runtime.neuronx_cc import COMPILER_ENV

pytest.importorskip("jax", reason="HLO conversion needs the nkipy-runtime[xla] extra")

TARGETS = ["trn1", "trn2", "trn3"]
COMPLEX_TYPE = re.compile(r"\bc(64|128)\[")


def _rope_step():
    """Forward and backward of the rotary embeddings, with their eager results."""
    rotary = torchtitan_rope.Rotary(8, 16)
    xq, xk = torchtitan_rope.inputs()
    eager = [t.clone().requires_grad_() for t in (xq, xk)]
    out = rotary(*eager)
    (out[0].sum() + (out[1] * out[1]).sum()).backward()
    expected = [*out, *(t.grad for t in eager)]

    compiled = [t.clone().requires_grad_() for t in (xq, xk)]
    out = torch.compile(rotary, backend="nkipy", options={"strict": True})(*compiled)
    (out[0].sum() + (out[1] * out[1]).sum()).backward()
    return [*out, *(t.grad for t in compiled)], expected


def _experts(x, w1, w2, offsets):
    h = F.silu(torch._grouped_mm(x.bfloat16(), w1.bfloat16().transpose(-2, -1), offs=offsets))
    return torch._grouped_mm(h, w2.bfloat16().transpose(-2, -1), offs=offsets)


def _experts_step():
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(s, generator=g) for s in ((16, 8), (3, 16, 8), (3, 8, 16))]
    offs = torch.tensor([5, 5, 16], dtype=torch.int32)
    eager = [a.clone().requires_grad_() for a in args]
    out = _experts(*eager, offs)
    out.float().sum().backward()
    compiled = [a.clone().requires_grad_() for a in args]
    got = torch.compile(_experts, backend="nkipy", options={"strict": True})(*compiled, offs)
    got.float().sum().backward()
    return [got, *(a.grad for a in compiled)], [out, *(a.grad for a in eager)]


def _hlo_texts(cache) -> list[str]:
    return [p.read_text() for p in sorted((cache / "kernels").glob(f"*/artifacts/{HLO_TEXT}"))]


def test_rope_and_experts_run_on_xla_and_emit_only_real_types(tmp_path):
    torch._dynamo.reset()
    init_nkipy_backend(nkipy_cache=tmp_path / "cache", runtime="xla")
    for step in (_rope_step, _experts_step):
        got, expected = step()
        for g, e in zip(got, expected):
            torch.testing.assert_close(g.detach(), e.detach(), rtol=2e-2, atol=2e-2)
    texts = _hlo_texts(tmp_path / "cache")
    assert len(texts) >= 4  # forward and backward of each program
    assert not [t for t in texts if COMPLEX_TYPE.search(t)]
    for target in TARGETS:
        assert [v for t in texts for v in violations(t, profile_for(target))] == []


@pytest.mark.parametrize("target", TARGETS)
def test_rope_and_experts_compile_for_every_neuron_target(tmp_path, monkeypatch, target):
    path, calls = neuronx_cc_standin.install(tmp_path / "bin")
    monkeypatch.setenv(COMPILER_ENV, str(path))
    monkeypatch.delenv("NKIPY_NEURON_INT64", raising=False)
    monkeypatch.setattr(precompile, "REPORT", precompile.Report())
    torch._dynamo.reset()
    cache = tmp_path / "cache"
    init_nkipy_backend(nkipy_cache=cache, runtime="cpu", precompile="nrt", target=target)
    _rope_step()
    _experts_step()
    report = precompile.REPORT
    assert report.failures == [] and report.compiled == 4
    assert len(neuronx_cc_standin.calls(calls)) == report.compiled
    texts = _hlo_texts(cache)
    assert texts and not [t for t in texts if COMPLEX_TYPE.search(t)]
    assert [v for t in texts for v in violations(t, profile_for(target))] == []
