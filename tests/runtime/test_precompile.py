"""``nkipy-ops precompile -- python script.py``: kernels compiled for ``nrt`` on a machine without
Neuron devices, while the script runs on ``cpu``; then a Trainium-like process that finds
everything in the cache.

The compiler is a STAND-IN (``tests/support/neuronx_cc_standin.py``): the real neuronx-cc was not
run, and no NEFF here was executed (this machine has no Neuron device); the "host" below stops at
the first device call, after showing that it planned, lowered and compiled nothing.
"""

from __future__ import annotations

import json
import sys
import textwrap

import neuronx_cc_standin
import pytest
import torch
from nkipy_cli import run

from nkipy_core.cache.kernel_cache import STATS
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_runtime import neuronx_cc, nrt_runtime

MODEL = textwrap.dedent("""
    import torch
    from nkipy_core import kernel_boundary

    def model(x, y):
        a = kernel_boundary(torch.sin(x) * y)
        b = kernel_boundary(torch.exp(a) - y)
        return torch.tanh(b) * a
""")

SCRIPT = MODEL + textwrap.dedent("""
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    out = torch.compile(model, backend="nkipy")(x, y)
    torch.testing.assert_close(out, model(x, y))
    print("script finished")
""")


@pytest.fixture
def script(tmp_path, monkeypatch):
    """The script, and the stand-in compiler (not the real neuronx-cc) named by NKIPY_NEURONX_CC."""
    path, calls = neuronx_cc_standin.install(tmp_path / "bin")
    monkeypatch.setenv(neuronx_cc.COMPILER_ENV, str(path))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return script, calls


def _summary(out: str) -> dict[str, str]:
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("kernels"))
    return dict(
        zip(["kernels", "compiled", "cached", "failed", "seconds"], lines[header + 2].split())
    )


def _precompile(capsys, tmp_path, script):
    return run(
        capsys,
        "precompile",
        "--target",
        "trn1",
        "--cache",
        str(tmp_path / "cache"),
        "--",
        sys.executable,
        str(script),
    )


class _NoDevice(Exception):
    """Raised where the nrt runtime would first touch a Neuron device."""


def test_precompile_then_a_host_process_neither_lowers_nor_compiles(
    capfd, tmp_path, script, monkeypatch, graphs
):
    path, calls = script
    code, out, _ = _precompile(capfd, tmp_path, path)
    assert code == 0, out
    assert "script finished" in out
    summary = _summary(out)
    assert (summary["kernels"], summary["compiled"], summary["cached"], summary["failed"]) == (
        "3",
        "3",
        "0",
        "0",
    )
    assert len(neuronx_cc_standin.calls(calls)) == 3

    code, out, _ = _precompile(capfd, tmp_path, path)  # a second run: all cached
    assert code == 0
    summary = _summary(out)
    assert (summary["kernels"], summary["compiled"], summary["cached"], summary["failed"]) == (
        "3",
        "0",
        "3",
        "0",
    )
    assert len(neuronx_cc_standin.calls(calls)) == 3

    # the Trainium host, as far as this machine can play it: nrt selected, same program, same cache
    monkeypatch.setattr(nrt_runtime.NrtRuntime, "available", lambda self: (True, ""))
    monkeypatch.setattr(
        nrt_runtime.NrtRuntime, "_device_handle", lambda self: (_ for _ in ()).throw(_NoDevice())
    )
    namespace: dict = {}
    exec(MODEL, namespace)
    before = dict(STATS)
    options = {"runtime": "nrt", "target": "trn1", "nkipy_cache": str(tmp_path / "cache")}
    with pytest.raises(_NoDevice):
        torch.compile(namespace["model"], backend="nkipy", options=options)(
            torch.randn(4, 3), torch.randn(4, 3)
        )
    (compiled,) = graphs
    kernels = [m for m in compiled.children() if isinstance(m, KernelCall)]
    assert len(kernels) == 3 and {k.runtime.name for k in kernels} == {"nrt"}
    assert all(json.loads(k.executable.neff)["target"] == "trn1" for k in kernels)
    for counter in ("planned_nodes", "lowered_kernels", "compiled_kernels"):
        assert STATS[counter] == before.get(counter, 0), counter
    assert len(neuronx_cc_standin.calls(calls)) == 3


def test_failed_kernels_are_counted_and_the_script_still_finishes(
    capfd, tmp_path, script, monkeypatch
):
    path, _ = script
    monkeypatch.setenv("STANDIN_MODE", "fail")
    code, out, _ = _precompile(capfd, tmp_path, path)
    assert "script finished" in out
    summary = _summary(out)
    assert (summary["kernels"], summary["compiled"], summary["failed"]) == ("3", "0", "3")
    assert "failed: nkipy_kernel_" in out and "NeuronCompilerError" in out
    assert code == 1


def test_precompile_without_a_compiler_fails_before_running(capsys, tmp_path, script, monkeypatch):
    path, _ = script
    monkeypatch.setenv(neuronx_cc.COMPILER_ENV, "")
    monkeypatch.setenv("PATH", str(tmp_path))
    code, out, err = _precompile(capsys, tmp_path, path)
    assert code == 2 and out == ""
    assert "cannot precompile for runtime 'nrt' on this machine: missing: neuronx-cc" in err


def test_precompile_needs_a_command(capsys):
    code, _, err = run(capsys, "precompile", "--")
    assert code == 2 and "give the command to run after --" in err


def test_the_kernels_precompiled_for_nrt_are_planned_for_nrt(capfd, tmp_path, monkeypatch):
    """Plans depend on the runtime: on ``cpu`` nkipy-ops-nki's softmax is an NKI custom call, which
    ``nrt`` does not run yet, so the kernels precompiled for nrt must hold the base softmax."""
    import nkipy_ops_nki  # noqa: F401 - the override this test is about

    monkeypatch.setenv("NKIPY_NKI_OVERRIDES", "1")  # the overrides are opt-in
    path, _ = neuronx_cc_standin.install(tmp_path / "bin")
    monkeypatch.setenv(neuronx_cc.COMPILER_ENV, str(path))
    script = tmp_path / "softmax.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        x = torch.randn(4, 8)
        out = torch.compile(lambda x: torch.softmax(x, -1) * 2, backend="nkipy", options={"runtime": "cpu"})(x)
        torch.testing.assert_close(out, torch.softmax(x, -1) * 2)
        print("script finished")
    """)
    )
    code, out, _ = _precompile(capfd, tmp_path, script)
    assert code == 0 and "script finished" in out, out
    cache = tmp_path / "cache"
    cpu_sources = [p.read_text() for p in cache.glob("kernels/*/kernel.py")]
    assert any("softmax_kernel#" in s for s in cpu_sources)  # what ran here: the NKI kernel
    hlo = [p.read_bytes() for p in cache.rglob("*.pb")]
    assert hlo and not any(b"AwsNeuronCustomNativeKernel" in h for h in hlo)
