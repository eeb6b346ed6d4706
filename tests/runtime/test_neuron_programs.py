"""Real programs compiled for every Neuron target hold no profile violation, and an op a target
cannot take runs on CPU with a warning that says why.

The programs run on the ``cpu`` runtime while every kernel is also compiled for ``nrt`` (as
``nkipy-ops precompile`` does) by the STAND-IN compiler (``tests/support/neuronx_cc_standin.py``;
the real neuronx-cc is not run): ``NrtRuntime.compile`` checks each module against the target's
profile before it starts the compiler, and these tests read the cached HLO of every kernel again.
"""

from __future__ import annotations

import neuronx_cc_standin
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from nkipy_core import init_nkipy_backend
from nkipy_core.compiler import precompile
from nkipy_runtime.hlo_files import HLO_TEXT
from nkipy_runtime.neuron import profile_for, violations
from nkipy_runtime.neuronx_cc import COMPILER_ENV
from nkipy_runtime.nrt_runtime import NEFF

pytest.importorskip("jax", reason="HLO conversion needs the nkipy-runtime[xla] extra")


class Tiny(nn.Module):
    """Embedding, attention with two dropouts, a vocabulary projection."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.q, self.k, self.v = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)
        self.out = nn.Linear(16, 50)

    def forward(self, ids):
        x = F.dropout(self.emb(ids), 0.1, self.training)
        att = torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2) / 4, -1)
        return self.out(F.dropout(att, 0.1, self.training) @ self.v(x))


def train_step(model, ids, target):
    logits = model(ids)
    loss = F.cross_entropy(logits.flatten(0, 1), target.flatten())
    loss.backward()
    return loss, logits.argmax(-1), logits.topk(3, -1).indices, (ids > 25).any()


@pytest.fixture
def standin(tmp_path, monkeypatch):
    path, calls = neuronx_cc_standin.install(tmp_path / "bin")
    monkeypatch.setenv(COMPILER_ENV, str(path))
    monkeypatch.delenv("NKIPY_NEURON_INT64", raising=False)
    return calls


def _nrt_entries(cache):
    """The cache entries of nrt kernels: those with a NEFF."""
    return [e for e in (cache / "kernels").iterdir() if (e / "artifacts" / NEFF).exists()]


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_training_and_generation_compile_for_every_target_without_violations(
    tmp_path, standin, monkeypatch, target
):
    torch._dynamo.reset()
    monkeypatch.setattr(precompile, "REPORT", precompile.Report())
    cache = tmp_path / "cache"
    init_nkipy_backend(nkipy_cache=cache, runtime="cpu", precompile="nrt", target=target)
    torch.manual_seed(0)
    model = Tiny()
    ids, target_ids = torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 8))
    loss, *_ = torch.compile(train_step, backend="nkipy")(model, ids, target_ids)
    assert torch.isfinite(loss)
    model.eval()
    generate = torch.compile(lambda m, seq: m(seq)[:, -1].argmax(-1), backend="nkipy")
    seq = ids[:1, :4]
    with torch.no_grad():
        for _ in range(2):
            seq = torch.cat([seq, generate(model, seq)[:, None]], 1)

    report = precompile.REPORT
    assert report.failures == [] and report.compiled >= 4
    profile = profile_for(target)
    entries = _nrt_entries(cache)
    assert len(entries) == report.compiled
    for entry in entries:
        assert violations((entry / "artifacts" / HLO_TEXT).read_text(), profile) == []
    calls = neuronx_cc_standin.calls(standin)
    assert len(calls) == report.compiled
    assert all(call["argv"][8:] == list(profile.compiler_flags()) for call in calls)


def test_an_op_the_target_cannot_take_stays_out_of_its_kernels(tmp_path, standin, monkeypatch):
    """f64 has no NeuronCore: the planner keeps f64 ops out of nrt kernels, while the f32 ops of
    the same graph still compile for nrt (the warning on nrt itself: test_nrt_end_to_end)."""
    torch._dynamo.reset()
    monkeypatch.setattr(precompile, "REPORT", precompile.Report())
    init_nkipy_backend(
        nkipy_cache=tmp_path / "cache", runtime="cpu", precompile="nrt", target="trn2"
    )

    def f(x):
        return torch.sin(x) * 2, x.double().exp()

    x = torch.randn(8)
    out, wide = torch.compile(f, backend="nkipy")(x)
    torch.testing.assert_close(out, torch.sin(x) * 2)
    torch.testing.assert_close(wide, x.double().exp())
    (entry,) = _nrt_entries(tmp_path / "cache")
    hlo = (entry / "artifacts" / HLO_TEXT).read_text()
    assert "sine" in hlo and "f64" not in hlo


@pytest.mark.parametrize(("target", "wide_in_kernel"), [("trn1", False), ("trn2", True)])
def test_randint_beyond_int32_stays_out_of_kernels_where_integers_are_32_bits(
    tmp_path, standin, monkeypatch, target, wide_in_kernel
):
    """A range that fits int32 draws one u32 word and compiles everywhere; a wider one needs
    64-bit words, which trn1 cannot hold, so there it runs on CPU (values beyond 2**31 intact)."""
    torch._dynamo.reset()
    monkeypatch.setattr(precompile, "REPORT", precompile.Report())
    cache = tmp_path / "cache"
    init_nkipy_backend(nkipy_cache=cache, runtime="cpu", precompile="nrt", target=target)

    def draw(x):
        return torch.randint(0, 10, (64,)) + x, torch.randint(2**31, 2**31 + 7, (64,))

    small, wide = torch.compile(draw, backend="nkipy")(torch.zeros((), dtype=torch.int64))
    assert 0 <= small.min() and small.max() < 10
    assert 2**31 <= wide.min() and wide.max() < 2**31 + 7
    assert precompile.REPORT.failures == []
    texts = [(e / "artifacts" / HLO_TEXT).read_text() for e in _nrt_entries(cache)]
    assert texts and any("ui32" in t or "u32[" in t for t in texts)
    assert any("u64[" in t for t in texts) == wide_in_kernel


def test_a_recorded_manifest_compiles_for_nrt_without_the_program(tmp_path, standin, monkeypatch):
    """``precompile --record`` then ``--from``: the kernels a training step lowered on the cpu
    runtime are compiled for nrt from the manifest alone, once; a second pass compiles nothing."""
    from nkipy_core.compiler import manifest
    from nkipy_core.compiler.kernels import compile_listed
    from nkipy_core.config.settings import current

    torch._dynamo.reset()
    path = tmp_path / "manifest.json"
    monkeypatch.setenv("NKIPY_MANIFEST_RECORD", str(path))
    monkeypatch.setattr(manifest, "RECORDER", manifest._Recorder())
    init_nkipy_backend(nkipy_cache=tmp_path / "recording", runtime="cpu")
    torch.manual_seed(0)
    model = Tiny()
    ids, target_ids = torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 8))
    torch.compile(train_step, backend="nkipy")(model, ids, target_ids)
    recorded = manifest.write(path, manifest.RECORDER)
    monkeypatch.delenv("NKIPY_MANIFEST_RECORD")
    assert recorded >= 2  # forward and backward at least

    runtime = precompile.target_runtime("nrt")  # the stand-in compiler makes it available
    cache = tmp_path / "build"
    config = current().override({"nkipy_cache": str(cache), "target": "trn2"})
    report = precompile.Report()
    compile_listed(manifest.kernels_of(path), config, runtime, report)
    assert report.failures == [] and report.compiled == recorded
    assert len(neuronx_cc_standin.calls(standin)) == recorded == len(_nrt_entries(cache))

    again = precompile.Report()
    compile_listed(manifest.kernels_of(path), config, runtime, again)
    assert again.cached == recorded and again.compiled == 0
    assert len(neuronx_cc_standin.calls(standin)) == recorded


def test_a_tampered_neff_is_compiled_again_never_loaded(tmp_path, standin, monkeypatch):
    """A NEFF changed in the cache, its checksum rewritten to match (what someone who can write
    the cache would do), has no valid seal: the kernel is compiled again, the NEFF replaced."""
    import hashlib
    import json

    from nkipy_core import cache_stats

    def step():
        torch._dynamo.reset()
        monkeypatch.setattr(precompile, "REPORT", precompile.Report())
        init_nkipy_backend(
            nkipy_cache=tmp_path / "cache", runtime="cpu", precompile="nrt", target="trn2"
        )
        x = torch.linspace(-1, 1, 32).reshape(4, 8)
        torch.testing.assert_close(
            torch.compile(lambda t: torch.tanh(t) * t, backend="nkipy")(x), torch.tanh(x) * x
        )
        return precompile.REPORT

    assert step().compiled == 1
    (entry,) = _nrt_entries(tmp_path / "cache")
    neff = entry / "artifacts" / NEFF
    neff.write_bytes(b"\x7fELF planted" + neff.read_bytes())
    meta = json.loads((entry / "meta.json").read_text())
    meta["files"][f"artifacts/{NEFF}"] = hashlib.sha256(neff.read_bytes()).hexdigest()
    (entry / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))

    cache_stats.clear()
    assert step().compiled == 1 and cache_stats["untrusted"] >= 1
    (entry,) = _nrt_entries(tmp_path / "cache")
    assert not (entry / "artifacts" / NEFF).read_bytes().startswith(b"\x7fELF planted")
    assert len(neuronx_cc_standin.calls(standin)) == 2
