"""The ``neuronx-cc`` driver and the ``nrt`` runtime's compile side.

Every compile here runs a STAND-IN for the compiler (``tests/support/neuronx_cc_standin.py``, an
executable named ``neuronx-cc`` that checks the documented argument contract and writes a fake
NEFF): the real neuronx-cc was not run, so nothing here shows that Neuron accepts our HLO.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time

import neuronx_cc_standin
import pytest
import torch

from nkipy_core import ConfigurationError, RuntimeUnavailableError, kernel_boundary, knp
from nkipy_core.cache.kernel_cache import STATS, KernelCache
from nkipy_core.ir import DType, KernelBuilder, TensorType
from nkipy_core.observe import progress
from nkipy_runtime import neuronx_cc, nrt_runtime, xla_bridge
from nkipy_runtime.stablehlo import emit_module


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The stand-in compiler (not the real neuronx-cc), named by NKIPY_NEURONX_CC; its call log."""
    path, calls = neuronx_cc_standin.install(tmp_path / "bin")
    monkeypatch.setenv(neuronx_cc.COMPILER_ENV, str(path))
    return calls


def _hlo() -> bytes:
    builder = KernelBuilder("k")
    x, y = (
        builder.param(TensorType((4, 3), DType.f32)),
        builder.param(TensorType((4, 3), DType.f32)),
    )
    with builder.building("test"):
        kernel = builder.finish([knp.sin(x) * y])
    return xla_bridge.to_hlo(emit_module(kernel)).proto


def test_command_line_is_the_documented_one_plus_extra_args(standin):
    """The stand-in rejects any other argv; it writes the SHA-256 of the .pb it was given."""
    proto = _hlo()
    build = neuronx_cc.compile_neff(
        proto,
        target="trn2",
        extra_args="--model-type transformer --auto-cast 'matmult'",
        timeout=30,
    )
    assert build.command[1:4] == ("compile", "--framework", "XLA")
    assert build.command[4].endswith("hlo_module.pb") and build.command[5:7] == ("--target", "trn2")
    neff = json.loads(build.neff)
    assert neff == {
        "stand_in": True,
        "input_sha256": hashlib.sha256(proto).hexdigest(),
        "target": "trn2",
        "extra": ["--model-type", "transformer", "--auto-cast", "matmult"],
    }
    assert "stand-in neuronx-cc: compiling" in build.log
    assert [c["argv"] for c in neuronx_cc_standin.calls(standin)] == [list(build.command[1:])]


def test_compiler_is_found_on_path(tmp_path, monkeypatch):
    path, _ = neuronx_cc_standin.install(tmp_path / "bin")
    monkeypatch.delenv(neuronx_cc.COMPILER_ENV, raising=False)
    monkeypatch.setenv("PATH", f"{path.parent}{os.pathsep}{os.environ['PATH']}")
    assert neuronx_cc.compiler_path() == str(path)


def test_missing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv(neuronx_cc.COMPILER_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeUnavailableError, match="neuronx-cc was not found on PATH"):
        neuronx_cc.compile_neff(b"x", target="trn1", timeout=5)
    ok, reason = nrt_runtime.NrtRuntime().can_compile()
    assert not ok
    assert reason.startswith(
        "missing: neuronx-cc is not on PATH (nor named by NKIPY_NEURONX_CC): install"
    )


@pytest.mark.parametrize(
    ("product", "target"),
    [
        ("trn1.32xlarge", "trn1"),
        ("trn1n.32xlarge", "trn1"),
        ("trn2.48xlarge", "trn2"),
        ("trn3.48xlarge", "trn3"),
        ("m5.xlarge", None),
    ],
)
def test_target_is_detected_from_the_instance_type(tmp_path, monkeypatch, product, target):
    dmi = tmp_path / "product_name"
    dmi.write_text(product + "\n")
    monkeypatch.setattr(neuronx_cc, "DMI_PRODUCT_NAME", dmi)
    assert neuronx_cc.detect_target() == target


def test_configured_target_wins_and_no_target_is_an_error(tmp_path, monkeypatch):
    dmi = tmp_path / "product_name"
    dmi.write_text("trn2.48xlarge")
    monkeypatch.setattr(neuronx_cc, "DMI_PRODUCT_NAME", dmi)
    assert neuronx_cc.resolve_target("trn1") == "trn1"
    assert neuronx_cc.resolve_target(None) == "trn2"
    with pytest.raises(
        ConfigurationError, match=r"unknown neuronx-cc target 'inf1'; use one of \['trn1'"
    ):
        neuronx_cc.resolve_target("inf1")
    monkeypatch.setattr(neuronx_cc, "DMI_PRODUCT_NAME", tmp_path / "absent")
    with pytest.raises(
        ConfigurationError, match="Set init_nkipy_backend\\(target=...\\) or NKIPY_TARGET"
    ):
        neuronx_cc.resolve_target(None)


def test_failure_raises_with_command_and_log_tail(standin, monkeypatch):
    monkeypatch.setenv("STANDIN_MODE", "fail")
    proto = _hlo()
    with pytest.raises(neuronx_cc.NeuronCompilerError) as caught:
        neuronx_cc.compile_neff(proto, target="trn1", extra_args="-O1", timeout=30)
    error = caught.value
    assert error.returncode == 1
    assert error.command[-1] == "-O1" and shlex.join(error.command) in str(error)
    assert "failed with exit code 1" in str(error) and "ERROR: stand-in compile failure" in str(
        error
    )
    assert (
        "stand-in log line 29" in error.log_tail and "stand-in log line 0\n" not in error.log_tail
    )
    assert "stand-in log line 0\n" in error.log_path.read_text()  # the full log is kept
    assert (error.log_path.parent / "hlo_module.pb").read_bytes() == proto  # so is the input


def test_timeout_kills_the_compiler(standin, monkeypatch):
    monkeypatch.setenv("STANDIN_MODE", "hang")
    start = time.monotonic()
    with pytest.raises(neuronx_cc.NeuronCompilerError, match="timed out after 0.5 s") as caught:
        neuronx_cc.compile_neff(_hlo(), target="trn1", timeout=0.5)
    assert time.monotonic() - start < 10
    assert caught.value.returncode is None


# -- the nrt runtime inside the compiler: the stand-in compiles, the program runs on cpu --------------


def _three_kernels(x, y):
    a = kernel_boundary(torch.sin(x) * y)
    b = kernel_boundary(torch.exp(a) - y)
    return torch.tanh(b) * a


def _precompile_for_nrt(target="trn1"):
    """Run ``_three_kernels`` on cpu while precompiling it for nrt; its result is checked against eager."""
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    options = {"precompile": "nrt", "target": target}
    out = torch.compile(_three_kernels, backend="nkipy", options=options)(x, y)
    torch.testing.assert_close(out, _three_kernels(x, y))


def _nrt_entries():
    """The cache entries compiled for nrt: (directory, meta)."""
    entries = (KernelCache("nkipy_cache").root / "kernels").iterdir()
    metas = [(d, json.loads((d / "meta.json").read_text())) for d in entries]
    return [(d, m) for d, m in metas if m["runtime"] == "nrt"]


def test_artifacts_land_in_the_cache_entry(standin):
    _precompile_for_nrt()
    entries = _nrt_entries()
    assert len(entries) == 3
    for entry, _ in entries:
        artifacts = entry / "artifacts"
        assert sorted(p.name for p in artifacts.iterdir()) == sorted(
            ["kernel.stablehlo.mlir", "hlo_module.pb", "hlo.txt", "kernel.neff", "neuronx-cc.log"]
        )
        proto = (artifacts / "hlo_module.pb").read_bytes()
        assert (
            json.loads((artifacts / "kernel.neff").read_bytes())["input_sha256"]
            == hashlib.sha256(proto).hexdigest()
        )
        assert "stand-in neuronx-cc: compiling" in (artifacts / "neuronx-cc.log").read_text()


def test_warm_cache_never_starts_the_compiler(standin):
    _precompile_for_nrt()
    assert len(neuronx_cc_standin.calls(standin)) == 3
    lowered = STATS["lowered_kernels"]
    torch._dynamo.reset()
    _precompile_for_nrt()
    assert len(neuronx_cc_standin.calls(standin)) == 3
    assert STATS["lowered_kernels"] == lowered


def test_target_is_part_of_the_cache_key(standin):
    _precompile_for_nrt("trn1")
    torch._dynamo.reset()
    _precompile_for_nrt("trn2")
    assert (
        sorted(c["argv"][5] for c in neuronx_cc_standin.calls(standin))
        == ["trn1"] * 3 + ["trn2"] * 3
    )
    assert len(_nrt_entries()) == 6


def test_independent_kernels_compile_in_parallel_with_progress(standin, monkeypatch, capsys):
    if (os.cpu_count() or 1) < 2:
        pytest.fail("this test needs 2 cores to show overlap")
    monkeypatch.setenv("STANDIN_MODE", "sleep")
    monkeypatch.setenv("STANDIN_SLEEP", "0.8")
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.3)
    _precompile_for_nrt()
    spans = sorted((c["start"], c["end"]) for c in neuronx_cc_standin.calls(standin))
    assert len(spans) == 3
    assert spans[1][0] < spans[0][1], f"the first two compiles did not overlap: {spans}"
    lines = [
        line
        for line in capsys.readouterr().err.splitlines()
        if line.startswith("nkipy: compiling 3 kernel(s) for nrt")  # not the run's own compiles
    ]
    assert lines[0].startswith("nkipy: compiling 3 kernel(s) for nrt: 0/3 done")
    assert lines[-1].startswith("nkipy: compiling 3 kernel(s) for nrt: 3/3 done")


def test_fast_compiles_show_no_progress(standin, capsys):
    _precompile_for_nrt()
    assert "nkipy: compiling" not in capsys.readouterr().err
