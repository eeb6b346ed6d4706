"""PyTorch's OpInfo set through nkipy-ops-base, compiled for every Neuron target: no kernel breaks
the target's profile.

Each OpInfo's first f32 sample runs on the ``cpu`` runtime while its kernels are also compiled for
``nrt`` (as ``nkipy-ops precompile`` does) by the STAND-IN compiler; the real neuronx-cc is not
run. ``NrtRuntime.compile`` checks every module against the profile first and a violation counts
as a failed compile, so zero failures means every module the planner let through is one the
documentation says the target takes. About 90 s per target on two cores, so two targets compile:
trn1 (64-bit integers in 32 bits) and trn3 (native). trn2 emits the same modules as trn3 (both
run 64-bit integers natively), so the trn3 run's modules are also read against trn2's profile
(the training program of ``test_neuron_programs`` compiles for all three).
"""

from __future__ import annotations

import neuronx_cc_standin
import pytest

from nkipy_core.compiler import precompile
from nkipy_core.testing import run_conformance
from nkipy_runtime.hlo_files import HLO_TEXT
from nkipy_runtime.neuron import profile_for, violations
from nkipy_runtime.neuronx_cc import COMPILER_ENV
from nkipy_runtime.nrt_runtime import NEFF

pytest.importorskip("jax", reason="HLO conversion needs the nkipy-runtime[xla] extra")


@pytest.mark.parametrize("target", ["trn1", "trn3"])
def test_the_opinfo_set_compiles_for_the_target_without_violations(tmp_path, monkeypatch, target):
    path, _ = neuronx_cc_standin.install(tmp_path / "bin")
    monkeypatch.setenv(COMPILER_ENV, str(path))
    monkeypatch.delenv("NKIPY_NEURON_INT64", raising=False)
    monkeypatch.setattr(precompile, "REPORT", precompile.Report())
    cache = tmp_path / "cache"
    report = run_conformance(
        "nkipy-ops-base",
        max_samples=1,
        backward=False,
        options={"precompile": "nrt", "target": target},
        cache_dir=cache,
        budget=900.0,
    )
    assert report.summary()["pass"] > 150
    failures = precompile.REPORT.failures
    assert failures == [], "\n".join(f"{f['kernel']}: {f['error'][:500]}" for f in failures)
    # the nrt entries: those with a NEFF (the run's own runtime, xla in one tox env, has hlo.txt too)
    nrt = [
        e / "artifacts" for e in (cache / "kernels").iterdir() if (e / "artifacts" / NEFF).exists()
    ]
    assert len(nrt) == precompile.REPORT.compiled > 150
    if target == "trn3":
        trn2 = profile_for("trn2")
        assert {str(a): violations((a / HLO_TEXT).read_text(), trn2) for a in nrt} == {
            str(a): [] for a in nrt
        }
