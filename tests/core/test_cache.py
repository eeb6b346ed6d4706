"""The kernel cache: entry contents, warm starts without lowering, corruption, concurrency."""

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from fixture_packs import arithmetic_rules, pack

from nkipy_core import cache_stats

HERE = Path(__file__).parent

# A user program run in fresh processes: registers the test pack, compiles, prints stats.
PROGRAM = textwrap.dedent("""
    import json, sys, torch
    sys.path.insert(0, {here!r})
    from fixture_packs import arithmetic_rules, pack
    from nkipy_core import cache_stats, plugins
    plugins.register(pack(arithmetic_rules(priority=1000)), "arith", "arith-pack", "1.0")  # outranks any installed pack
    plugins.reload()
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7
    out = torch.compile(lambda a: torch.exp(a) * a + 1, backend="nkipy", options={{"nkipy_cache": sys.argv[1]}})(x)
    ok = torch.allclose(out, torch.exp(x) * x + 1)
    print(json.dumps({{"ok": ok, **cache_stats}}))
""").format(here=str(HERE))


def run_program(cache: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PROGRAM, str(cache)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def arithmetic(plugin_env):
    plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.0")


def compile_once(cache):
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    out = torch.compile(
        lambda a: torch.exp(a) * a, backend="nkipy", options={"nkipy_cache": str(cache)}
    )(x)
    torch.testing.assert_close(out, torch.exp(x) * x)


def test_entry_holds_graph_source_ir_meta_and_artifacts(arithmetic, tmp_path):
    compile_once(tmp_path / "c")
    (entry,) = (tmp_path / "c" / "kernels").iterdir()
    assert sorted(p.name for p in entry.iterdir()) == [
        "artifacts",
        "graph.py",
        "kernel.ir",
        "kernel.py",
        "meta.json",
        "seal.json",
    ]
    meta = json.loads((entry / "meta.json").read_text())
    assert (
        meta["runtime"] == "cpu"
        and meta["inputs"] == ["f32[3x4]"]
        and meta["outputs"] == ["f32[3x4]"]
    )
    assert set(meta["files"]) == {
        "graph.py",
        "kernel.ir",
        "kernel.py",
        "artifacts/kernel.ir",
        "artifacts/kernel.data.json",
    }
    assert "torch.ops.aten.exp.default" in (entry / "graph.py").read_text()
    assert "= exp(%v0)" in (entry / "kernel.ir").read_text()
    assert "def kernel(v0):" in (entry / "kernel.py").read_text()


def test_warm_cache_in_a_new_process_skips_lowering(tmp_path):
    cold = result(run_program(tmp_path / "c"))
    warm = result(run_program(tmp_path / "c"))
    assert cold["ok"] and warm["ok"]
    assert (
        cold["lowered_kernels"] == 1 and cold["compiled_kernels"] == 1 and cold["planned_nodes"] > 0
    )
    assert warm.get("lowered_kernels", 0) == 0 and warm.get("planned_nodes", 0) == 0
    assert warm.get("compiled_kernels", 0) == 0 and warm["hits"] == 1


def test_corrupt_entry_is_detected_logged_and_rebuilt(arithmetic, tmp_path, caplog):
    compile_once(tmp_path / "c")
    (entry,) = (tmp_path / "c" / "kernels").iterdir()
    ir = entry / "artifacts" / "kernel.ir"
    ir.write_text(ir.read_text().replace("exp(%v0)", "neg(%v0)"))  # silently wrong
    torch._dynamo.reset()
    before = cache_stats["corrupt"]
    with caplog.at_level(logging.WARNING, logger="nkipy.cache"):
        compile_once(tmp_path / "c")  # asserts the result is right, not the tampered one
    assert cache_stats["corrupt"] == before + 1
    assert (
        "is corrupt or partial (artifacts/kernel.ir does not match its checksum); rebuilding it"
        in caplog.text
    )
    meta = json.loads((entry / "meta.json").read_text())  # rebuilt in place
    assert meta["outputs"] == ["f32[3x4]"]


def test_partial_entry_without_meta_is_rebuilt(arithmetic, tmp_path):
    compile_once(tmp_path / "c")
    (entry,) = (tmp_path / "c" / "kernels").iterdir()
    (entry / "meta.json").unlink()  # e.g. a crash of an older, non-atomic writer
    torch._dynamo.reset()
    compile_once(tmp_path / "c")
    assert (entry / "meta.json").exists()


def test_two_processes_compiling_the_same_graph_at_once(tmp_path):
    procs = [run_program(tmp_path / "shared") for _ in range(2)]
    results = [result(p) for p in procs]
    assert all(r["ok"] for r in results)
    (entry,) = (tmp_path / "shared" / "kernels").iterdir()
    assert json.loads((entry / "meta.json").read_text())["outputs"] == ["f32[3x4]"]
    assert not list((tmp_path / "shared" / "tmp").iterdir())  # no staging left behind
    assert result(run_program(tmp_path / "shared"))["hits"] == 1


def test_identical_kernels_from_different_graphs_share_one_entry(arithmetic, tmp_path):
    opts = {"nkipy_cache": str(tmp_path / "c")}
    x = torch.randn(5)
    torch.compile(lambda a: torch.exp(a) * a, backend="nkipy", options=opts)(x)
    with pytest.warns(UserWarning, match="aten::tanh.default runs on CPU"):
        torch.compile(lambda a: torch.tanh(torch.exp(a) * a), backend="nkipy", options=opts)(x)
    assert len(list((tmp_path / "c" / "kernels").iterdir())) == 1


def _exp_pack(factor: int):
    """The same rule name and pack version, with different code (an edited editable install)."""
    namespace = {"knp": __import__("nkipy_core").knp, "__name__": "edited_pack"}
    exec(f"def exp_rule(ctx, x):\n    return knp.exp(x) * {factor}\n", namespace)  # noqa: S102
    from nkipy_core import RuleSet

    rules = RuleSet()
    rules.register(torch.ops.aten.exp.default)(namespace["exp_rule"])
    return pack(rules)


def test_editing_a_rule_invalidates_its_cached_kernels(plugin_env, tmp_path):
    opts = {"nkipy_cache": str(tmp_path / "c")}
    x = torch.randn(4)
    plugin_env.add(_exp_pack(2), "edited", "edited-pack", "1.0")
    torch.testing.assert_close(
        torch.compile(torch.exp, backend="nkipy", options=opts)(x), torch.exp(x) * 2
    )
    from nkipy_core.plugin import manager as plugins

    plugins.unregister("edited")
    torch._dynamo.reset()
    plugin_env.add(_exp_pack(3), "edited", "edited-pack", "1.0")
    torch.testing.assert_close(
        torch.compile(torch.exp, backend="nkipy", options=opts)(x), torch.exp(x) * 3
    )


HELPER_PROGRAM = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, sys.argv[2])
    import helperpack
    from nkipy_core import plugins
    plugins.register(helperpack, "helperpack", "helper-pack", "1.0")
    plugins.reload()
    x = torch.ones(3)
    out = torch.compile(torch.exp, backend="nkipy", options={"nkipy_cache": sys.argv[1]})(x)
    print(round(float(out[0] / torch.exp(x[0])), 3))
""")


def test_editing_a_helper_of_a_rule_invalidates_its_cached_kernels(tmp_path):
    """The rule is unchanged; a constant in another module of its package changes."""
    package = tmp_path / "src" / "helperpack"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        textwrap.dedent("""
        import torch
        from nkipy_core import hookimpl, knp
        from .consts import FACTOR

        @hookimpl
        def nkipy_register_lowerings(registry):
            registry.register(torch.ops.aten.exp.default, lambda ctx, x: knp.exp(x) * FACTOR, priority=1000)
    """)
    )
    outputs = []
    for factor in (2, 3):
        (package / "consts.py").write_text(f"FACTOR = {factor}\n")
        proc = subprocess.run(
            [sys.executable, "-c", HELPER_PROGRAM, str(tmp_path / "c"), str(tmp_path / "src")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout.split()[-1])
    assert outputs == ["2.0", "3.0"]
