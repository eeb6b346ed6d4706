"""Every distribution installed together: all plugins load, and the tools report them."""

import json
import subprocess

PACKS = {
    "nkipy_ops_base": "nkipy-ops-base",
    "nkipy_ops_collectives": "nkipy-ops-collectives",
    "nkipy_ops_nki": "nkipy-ops-nki",
    "nkipy_runtime": "nkipy-runtime",
}


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def test_every_plugin_loads_with_its_provenance():
    result = run("nkipy-ops", "list", "--format", "json")
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    plugins = {p["name"]: p for p in listing["plugins"]}
    assert set(plugins) == {"cpu", *PACKS}
    for name, dist in PACKS.items():
        assert plugins[name]["status"] == "ok", plugins[name]
        assert plugins[name]["distribution"] == dist
    providers = {row["provider"] for row in listing["lowerings"]}
    assert providers == {"nkipy-ops-base"}  # the other packs are skeletons that register nothing yet


def test_doctor_reports_a_usable_runtime():
    result = run("nkipy-ops", "doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    for dist in ("nkipy-core", *PACKS.values()):
        assert dist in result.stdout
