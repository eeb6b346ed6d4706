"""The ``nkipy-ops`` CLI: what it lists is what the plugin manager loaded, in text and JSON.

Most tests use the hermetic ``plugin_env`` (only nkipy-core's plugins plus in-process packs), so
they pass in every tox environment (``tests/ops_base/test_cli_base.py`` checks the real installed
nkipy-ops-base); the ``fake_site`` tests put two real (tiny) distributions on ``sys.path`` to prove
third-party entry-point discovery, in-process and through the installed console script.
"""

import inspect
import json
import re
import shutil
import subprocess
import sys
import types
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import torch
from fake_dists import write_distribution
from fixture_packs import arithmetic_rules, declining_rules, pack
from nkipy_cli import by, line_of, run, run_json, section

from nkipy_core import PluginConflictError, hookimpl
from nkipy_core.cli.coverage import core_aten_ops
from nkipy_core.plugin import manager as plugins
from nkipy_core.plugin.registry import resolve_op
from nkipy_core.runtime.cpu import CpuRuntime


def _installed(distribution):
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


BASE_VERSION = _installed("nkipy-ops-base")


def failing_plugin(message):
    @hookimpl
    def nkipy_register_lowerings(registry):
        raise RuntimeError(message)

    return types.SimpleNamespace(nkipy_register_lowerings=nkipy_register_lowerings)


class FakeHardware:
    """A runtime that is registered but cannot run here, like ``nrt`` without neuronx-cc."""

    name = "fakehw"
    priority = 10

    def available(self):
        return False, "fakehw-driver not found on PATH; pip install fakehw[driver] on a FakeHW host"


class CrashingProbe:
    name = "crashy"
    priority = 5

    def available(self):
        raise OSError("/dev/crashy: permission denied")


def runtime_pack(*runtimes):
    @hookimpl
    def nkipy_register_runtimes(registry):
        for runtime in runtimes:
            registry.register(runtime)

    return types.SimpleNamespace(nkipy_register_runtimes=nkipy_register_runtimes)


# --------------------------------------------------------------------------- list


def test_core_alone_lists_no_lowerings_cpu_plugin_and_runtime(plugin_env, capsys):
    code, out, err = run(capsys, "list")
    assert code == 0, err
    assert section(out, "Lowerings").strip().startswith("no lowerings installed")
    plugin_row = line_of(section(out, "Plugins"), "cpu ")
    assert plugin_row == [
        "cpu",
        "nkipy-core",
        version("nkipy-core"),
        "-",
        "ok",
        "nkipy_core.runtime.cpu",
    ]
    runtime_row = line_of(section(out, "Runtimes"), "cpu ")
    assert runtime_row == [
        "cpu",
        "0",
        "nkipy-core",
        version("nkipy-core"),
        "no",
        "yes",
        "-",
    ]  # a simulator

    data = run_json(capsys, "list")
    assert data["lowerings"] == []
    assert [(p["name"], p["status"]) for p in data["plugins"]] == [("cpu", "ok")]
    assert data["runtimes"] == [
        {
            "name": "cpu",
            "priority": 0,
            "provider": "nkipy-core",
            "version": version("nkipy-core"),
            "hardware": False,
            "available": True,
            "reason": "",
            "details": "",
        }
    ]


def test_list_shows_provider_priority_overrides_and_location(plugin_env, capsys):
    plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.2")
    plugin_env.add(pack(declining_rules(priority=10)), "fastexp", "fast_exp", "0.3")

    code, out, err = run(capsys, "list")
    assert code == 0, err
    assert line_of(out, "aten::exp.default")[:5] == [
        "aten::exp.default",
        "fast_exp",
        "0.3",
        "10",
        "arith-pack",
    ]
    assert line_of(out, "aten::add.Tensor")[:5] == [
        "aten::add.Tensor",
        "arith-pack",
        "1.2",
        "0",
        "-",
    ]
    assert line_of(out, "aten::add.Tensor")[5].startswith("fixture_packs.py:")

    data = run_json(capsys, "list")
    assert [r["op"] for r in data["lowerings"]] == [
        "aten::add.Tensor",
        "aten::exp.default",
        "aten::mean.dim",
        "aten::mul.Tensor",
    ]
    exp = by(data["lowerings"], "op", "aten::exp.default")
    assert (exp["provider"], exp["version"], exp["priority"], exp["plugin"]) == (
        "fast_exp",
        "0.3",
        10,
        "fastexp",
    )
    assert [(o["provider"], o["version"], o["priority"]) for o in exp["overridden"]] == [
        ("arith-pack", "1.2", 0)
    ]
    winner = plugins.get().lowerings.rules_for(torch.ops.aten.exp.default)[0].fn
    assert exp["location"] == f"{inspect.getsourcefile(winner)}:{inspect.getsourcelines(winner)[1]}"
    assert exp["qualname"].endswith("declining_rules.<locals>.exp_only_big")


def test_pack_filter_accepts_both_spellings_and_keeps_overridden_rules(plugin_env, capsys):
    plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.2")
    plugin_env.add(pack(declining_rules(priority=10)), "fastexp", "fast_exp", "0.3")

    for spelling in ("fast_exp", "fast-exp", "Fast.Exp"):
        data = run_json(capsys, "list", "--pack", spelling)
        assert data["pack"] == "fast-exp"
        assert [r["op"] for r in data["lowerings"]] == ["aten::exp.default"]
    # arith-pack's exp is overridden but is still one of the ops that pack lowers
    ops = [r["op"] for r in run_json(capsys, "list", "--pack", "arith_pack")["lowerings"]]
    assert ops == ["aten::add.Tensor", "aten::exp.default", "aten::mean.dim", "aten::mul.Tensor"]

    code, out, err = run(capsys, "list", "--pack", "nkipy-core")
    assert code == 0 and "no lowerings from nkipy-core" in out

    code, out, err = run(capsys, "list", "--pack", "no-such-pack")
    assert code == 2 and out == ""
    assert "no installed distribution named 'no-such-pack'" in err and "arith-pack" in err


def test_failed_plugin_is_listed_with_its_error_and_others_still_load(plugin_env, capsys):
    plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.2")
    plugin_env.add(failing_plugin("needs libfoo 2.0"), "broken", "broken-pack", "9.9")

    code, out, err = run(capsys, "list")
    assert code == 0, err
    row = line_of(section(out, "Plugins"), "broken ")
    assert row[:5] == ["broken", "broken-pack", "9.9", "-", "failed"]
    assert "register: RuntimeError: needs libfoo 2.0" in " ".join(row)
    assert line_of(section(out, "Plugins"), "arith ")[4] == "ok"
    assert "1 plugin(s) were skipped (failed or incompatible)" in out

    plugin = by(run_json(capsys, "list")["plugins"], "name", "broken")
    assert (plugin["status"], plugin["error"]) == (
        "failed",
        "register: RuntimeError: needs libfoo 2.0",
    )


@pytest.mark.parametrize(
    "argv", [["list", "--strict"], ["--strict", "list"], ["doctor", "--strict"]]
)
def test_strict_makes_a_failed_plugin_exit_2_without_traceback(plugin_env, capsys, argv):
    plugin_env.add(failing_plugin("needs libfoo 2.0"), "broken", "broken-pack", "9.9")

    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("nkipy-ops: error: plugin 'broken' (broken-pack 9.9) failed to register")
    assert "needs libfoo 2.0" in err and "Traceback" not in err


def test_conflicting_packs_are_a_clean_error_naming_both(plugin_env, capsys):
    plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.2")
    with pytest.raises(PluginConflictError):
        plugin_env.add(pack(arithmetic_rules()), "arith2", "other-pack", "3.0")

    code, out, err = run(capsys, "list")
    assert code == 2 and out == ""
    assert "arith-pack 1.2" in err and "other-pack 3.0" in err and "Traceback" not in err


# --------------------------------------------------------------------------- coverage


def test_core_aten_opset_is_the_core_tagged_overloads():
    ops = core_aten_ops()
    assert len(ops) == len(set(ops)) > 150
    assert {"aten::add.Tensor", "aten::convolution.default", "aten::amax.default"} <= set(ops)
    assert "aten::add.out" not in ops and "aten::linear.default" not in ops  # not core
    assert all(torch.Tag.core in resolve_op(op).tags for op in ops)


def test_coverage_counts_registered_core_ops_and_lists_the_rest(plugin_env, capsys):
    plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.2")
    registered = plugins.get().lowerings.ops()
    core_registered = [op for op in registered if torch.Tag.core in resolve_op(op).tags]

    report = run_json(capsys, "list", "--coverage", "core-aten")
    assert report["opset"] == "core-aten" and report["torch"] == torch.__version__
    assert report["covered"] == len(core_registered) == len(report["covered_ops"]) == 4
    excluded = {e["op"]: e["reason"] for e in report["excluded"]}
    assert (
        report["covered"] + len(excluded) + len(report["missing"])
        == report["total"]
        == len(core_aten_ops())
    )
    assert set(report["covered_ops"]) == set(core_registered)
    assert not set(report["missing"]) & set(registered)
    assert not set(report["missing"]) & set(excluded)
    assert "aten::sigmoid.default" in report["missing"]
    assert excluded["aten::nonzero.default"].startswith("data-dependent output shape:")

    code, out, err = run(capsys, "list", "--coverage", "core-aten")
    assert code == 0, err
    assert re.search(rf"\b4/{report['total']} overloads lowered\b", out)
    assert f"missing ({report['total'] - 4 - len(excluded)}):" in out
    assert f"excluded ({len(excluded)}), not lowerable by design:" in out
    assert re.search(r"^  aten::sym_size\.int +symbolic-size query: ", out, re.M)
    assert "  aten::sigmoid.default" in out.splitlines()
    assert "  aten::add.Tensor" not in out.splitlines()


def test_coverage_with_core_alone_and_per_pack(plugin_env, capsys):
    report = run_json(capsys, "list", "--coverage", "core-aten")
    assert (
        report["covered"] == 0
        and len(report["missing"]) + len(report["excluded"]) == report["total"]
    )

    plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.2")
    plugin_env.add(pack(declining_rules(priority=10)), "fastexp", "fast-exp", "0.3")
    report = run_json(capsys, "list", "--coverage", "core-aten", "--pack", "fast_exp")
    assert report["pack"] == "fast-exp" and report["covered_ops"] == ["aten::exp.default"]


def test_usage_errors_help_and_version(plugin_env, capsys):
    code, out, err = run(capsys, "list", "--coverage", "core-prims")
    assert code == 2 and "invalid choice" in err
    code, out, err = run(capsys)
    assert code == 2 and "COMMAND" in err
    code, out, err = run(capsys, "list", "--help")
    assert code == 0 and "--coverage" in out and "--pack" in out and "--strict" in out
    code, out, err = run(capsys, "--version")
    assert code == 0 and out.strip() == f"nkipy-ops {version('nkipy-core')}"


# --------------------------------------------------------------------------- doctor


def test_doctor_reports_versions_and_what_unavailable_runtimes_need(plugin_env, capsys):
    plugin_env.add(runtime_pack(FakeHardware(), CrashingProbe()), "hw", "fakehw-runtime", "0.7")

    code, out, err = run(capsys, "doctor")
    assert code == 0, err
    for name, value in [
        ("python", sys.version.split()[0]),
        ("torch", torch.__version__),
        ("numpy", __import__("numpy").__version__),
        ("nkipy-core", version("nkipy-core")),
        ("fakehw-runtime", "0.7"),
    ]:
        assert line_of(out, f"  {name} ")[1] == value
    assert line_of(section(out, "Runtimes"), "fakehw ")[:6] == [
        "fakehw",
        "10",
        "fakehw-runtime",
        "0.7",
        "no",
        "no",
    ]
    assert "Runtime torch.compile will use: cpu (highest-priority available)" in out
    assert (
        "Torch device: nkipy (registered by torch autoload); torch.accelerator does not pick it: "
        in out
    )
    assert (
        "Note: runtime 'fakehw' is unavailable: fakehw-driver not found on PATH; "
        "pip install fakehw[driver] on a FakeHW host"
    ) in out
    assert "available() raised OSError: /dev/crashy: permission denied" in out

    report = run_json(capsys, "doctor")
    assert report["ok"] is True and report["selection"]["selected"] == "cpu"
    assert report["device"] == {
        "name": "nkipy",
        "registered": True,
        "autoload": True,
        "privateuse1": "nkipy",
        "accelerator": False,
    }
    assert [r["name"] for r in report["runtimes"]] == ["fakehw", "crashy", "cpu"]
    assert by(report["runtimes"], "name", "fakehw")["reason"].startswith("fakehw-driver not found")


def test_doctor_exits_1_when_no_runtime_is_available(plugin_env, capsys, monkeypatch):
    monkeypatch.setattr(CpuRuntime, "available", lambda self: (False, "cpu disabled by this test"))
    code, out, err = run(capsys, "doctor")
    assert code == 1
    assert "Problem: no runtime is available" in out
    assert "Note: runtime 'cpu' is unavailable: cpu disabled by this test" in out


def test_doctor_checks_the_runtime_nkipy_runtime_names(plugin_env, capsys, monkeypatch):
    plugin_env.add(runtime_pack(FakeHardware()), "hw", "fakehw-runtime", "0.7")
    monkeypatch.setenv("NKIPY_RUNTIME", "fakehw")
    code, out, _ = run(capsys, "doctor")
    assert code == 1
    assert "Problem: NKIPY_RUNTIME='fakehw' is not available: fakehw-driver not found" in out

    monkeypatch.setenv("NKIPY_RUNTIME", "cpu")
    code, out, _ = run(capsys, "doctor")
    assert code == 0 and "Runtime torch.compile will use: cpu (NKIPY_RUNTIME)" in out


def test_doctor_marks_failed_plugins_as_problems(plugin_env, capsys):
    plugin_env.add(failing_plugin("needs libfoo 2.0"), "broken", "broken-pack", "9.9")
    code, out, _ = run(capsys, "doctor")
    assert code == 0  # the cpu runtime still works; the pack's ops fall back
    assert (
        "Problem: plugin 'broken' (broken-pack) was skipped: register: RuntimeError: needs libfoo 2.0"
        in out
    )


# --------------------------------------------------------------------------- the real install


# --------------------------------------------------------------------------- real distributions on disk


FAKE_DISTRIBUTIONS = {"fakepack", "brokenpack"}


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    """A site dir holding a working third-party pack and one that raises on import.

    Other installed packs are hidden, so the result does not depend on what else is installed.
    """
    site = tmp_path / "site"
    site.mkdir()
    write_distribution(
        site,
        "fakepack",
        "fakepack_plugin",
        """
        import torch
        from nkipy_core import hookimpl, knp

        @hookimpl
        def nkipy_register_lowerings(registry):
            @registry.register(torch.ops.aten.erf.default, priority=7)
            def erf(ctx, x):
                return knp.tanh(x)
    """,
    )
    write_distribution(
        site,
        "brokenpack",
        "brokenpack_plugin",
        """
        raise ImportError("brokenpack needs libbroken.so; install brokenpack[native]")
    """,
    )
    monkeypatch.syspath_prepend(str(site))
    real = plugins._entry_point_candidates
    monkeypatch.setattr(
        plugins,
        "_entry_point_candidates",
        lambda: [
            c for c in real() if c.provenance.distribution in {"nkipy-core", *FAKE_DISTRIBUTIONS}
        ],
    )
    plugins.reload()
    yield site
    monkeypatch.undo()
    for module in ("fakepack_plugin", "brokenpack_plugin"):
        sys.modules.pop(module, None)
    plugins.reload()


def test_entry_point_packs_on_sys_path_are_discovered(fake_site, capsys):
    data = run_json(capsys, "list")
    fake = by(data["plugins"], "name", "fakepack")
    broken = by(data["plugins"], "name", "brokenpack")
    assert (fake["distribution"], fake["version"], fake["status"], fake["module"]) == (
        "fakepack",
        "0.1",
        "ok",
        "fakepack_plugin",
    )
    assert (broken["distribution"], broken["status"]) == ("brokenpack", "failed")
    assert (
        broken["error"]
        == "import: ImportError: brokenpack needs libbroken.so; install brokenpack[native]"
    )
    erf = by(data["lowerings"], "op", "aten::erf.default")
    assert (erf["provider"], erf["version"], erf["priority"]) == ("fakepack", "0.1", 7)
    source = fake_site / "fakepack_plugin.py"
    # inspect reports a decorated function at its first decorator line
    line = (
        source.read_text()
        .splitlines()
        .index("    @registry.register(torch.ops.aten.erf.default, priority=7)")
        + 1
    )
    assert erf["location"] == f"{source}:{line}"

    code, out, err = run(capsys, "list", "--strict")
    assert code == 2 and "brokenpack" in err and "libbroken.so" in err and "Traceback" not in err


def _console_script():
    """The ``nkipy-ops`` script installed beside this interpreter (the one pip generated)."""
    beside = Path(sys.executable).with_name("nkipy-ops")
    script = str(beside) if beside.exists() else shutil.which("nkipy-ops")
    assert script, "the nkipy-ops console script is not installed; pip install ./nkipy_core"
    return script


def test_console_script_in_a_subprocess(fake_site, tmp_path):
    """The real entry point, in fresh processes (run concurrently: each one imports torch)."""
    env = {**__import__("os").environ, "PYTHONPATH": str(fake_site)}
    env.pop("NKIPY_RUNTIME", None)
    commands = {
        "list": ["list", "--format", "json"],
        "strict": ["--strict", "list"],
    }
    procs = {
        key: subprocess.Popen(
            [_console_script(), *argv],
            cwd=tmp_path,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for key, argv in commands.items()
    }
    results = {
        key: (*proc.communicate(timeout=120), proc.returncode) for key, proc in procs.items()
    }

    out, err, code = results["list"]
    assert code == 0, err
    data = json.loads(out)
    statuses = {p["name"]: p["status"] for p in data["plugins"]}
    assert (
        statuses["cpu"] == "ok"
        and statuses["fakepack"] == "ok"
        and statuses["brokenpack"] == "failed"
    )
    assert by(data["lowerings"], "op", "aten::erf.default")["provider"] == "fakepack"
    assert by(data["runtimes"], "name", "cpu")["available"] is True
    if BASE_VERSION is not None:
        add = by(data["lowerings"], "op", "aten::add.Tensor")
        assert (add["provider"], add["version"]) == ("nkipy-ops-base", BASE_VERSION)

    out, err, code = results["strict"]
    assert code == 2 and out == ""
    assert err.startswith("nkipy-ops: error: plugin 'brokenpack' (brokenpack 0.1) failed to import")
    assert "Traceback" not in err
