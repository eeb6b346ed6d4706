"""Every distribution installed together: all plugins load, and the tools report them."""

import json
import os
import subprocess

PACKS = {
    "nkipy_ops_base": "nkipy-ops-base",
    "nkipy_ops_collectives": "nkipy-ops-collectives",
    "nkipy_ops_nki": "nkipy-ops-nki",
    "nkipy_runtime": "nkipy-runtime",
}


def run(*args, **env):
    return subprocess.run(
        args, capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


def test_every_plugin_loads_with_its_provenance():
    result = run("nkipy-ops", "list", "--format", "json")
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    plugins = {p["name"]: p for p in listing["plugins"]}
    assert set(plugins) == {"cpu", *PACKS}
    for name, dist in PACKS.items():
        assert plugins[name]["status"] == "ok", plugins[name]
        assert plugins[name]["distribution"] == dist
        # each pack states the hook API it was made for (nkipy-ops-base registers complex rules)
        assert plugins[name]["hook_api"] == (">=1.2,<2" if dist == "nkipy-ops-base" else ">=1.0,<2")
    providers = {row["provider"] for row in listing["lowerings"]}
    assert providers == {
        "nkipy-ops-base",
        "nkipy-ops-collectives",
        "nkipy-ops-nki",
    }  # nkipy-runtime gives runtimes
    nki = sorted(row["op"] for row in listing["lowerings"] if row["provider"] == "nkipy-ops-nki")
    assert nki == [
        "aten::_softmax.default",
        "nkipy_nki::rms_norm.default",
    ]  # NKIPY_NKI_OVERRIDES=1 (tox.ini)
    collectives = sorted(
        row["op"] for row in listing["lowerings"] if row["provider"] == "nkipy-ops-collectives"
    )
    assert collectives == [
        f"_c10d_functional::{name}.default"
        for name in (
            "all_gather_into_tensor",
            "all_reduce",
            "all_to_all_single",
            "broadcast",
            "reduce_scatter_tensor",
            "wait_tensor",
        )
    ]
    runtimes = {row["name"]: row for row in listing["runtimes"]}
    assert {name: row["provider"] for name, row in runtimes.items()} == {
        "cpu": "nkipy-core",
        "nrt": "nkipy-runtime",
        "xla": "nkipy-runtime",
        "auto": "nkipy-runtime",
        "inductor": "nkipy-runtime",
    }
    assert runtimes["nrt"]["hardware"] and not runtimes["xla"]["hardware"]


def test_doctor_says_what_nrt_xla_and_auto_are_missing_here_and_inductor_is_not():
    """This env installs nkipy-runtime without extras, on a machine without the Neuron SDK."""
    result = run("nkipy-ops", "doctor", "--format", "json")
    runtimes = {row["name"]: row for row in json.loads(result.stdout)["runtimes"]}
    assert not runtimes["nrt"]["available"]
    for needed in (
        "neuronx-cc is not on PATH",
        "libnrt.so was not found",
        "no Neuron devices (/dev/neuron*)",
    ):
        assert needed in runtimes["nrt"]["reason"]
    for needs_xla in ("xla", "auto"):
        assert not runtimes[needs_xla]["available"]
        assert "pip install 'nkipy-runtime[xla]'" in runtimes[needs_xla]["reason"]
    assert runtimes["inductor"]["available"]  # torch and a C++ compiler are all it needs


def test_doctor_reports_a_usable_runtime():
    result = run("nkipy-ops", "doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    for dist in ("nkipy-core", *PACKS.values()):
        assert dist in result.stdout


def test_the_nki_overrides_are_opt_in():
    result = run(
        "nkipy-ops", "list", "--pack", "nkipy-ops-nki", "--format", "json", NKIPY_NKI_OVERRIDES="0"
    )
    assert result.returncode == 0, result.stderr
    assert [row["op"] for row in json.loads(result.stdout)["lowerings"]] == [
        "nkipy_nki::rms_norm.default"
    ]
