"""Plugin discovery, provenance, priorities, conflicts, declines and broken plugins."""

import logging
import sys
import textwrap
import types
import warnings
from importlib.metadata import distribution

import pytest
import torch
from fixture_packs import arithmetic_rules, declining_rules, pack

from nkipy_core import FallbackWarning, PluginConflictError, PluginError, hookimpl
from nkipy_core.plugin import manager as plugins

aten = torch.ops.aten


def test_core_alone_registers_the_cpu_runtime_through_the_hook(plugin_env):
    loaded = plugins.get()
    (cpu,) = [s for s in loaded.statuses if s.name == "cpu"]
    assert cpu.ok and cpu.module == "nkipy_core.runtime.cpu"
    assert cpu.provenance.distribution == "nkipy-core"
    assert cpu.provenance.version == distribution("nkipy-core").version
    assert loaded.runtimes.names() == ["cpu"]
    assert loaded.lowerings.ops() == []


def test_rules_carry_provenance_and_higher_priority_wins(plugin_env):
    plugin_env.add(pack(arithmetic_rules()), "base-like", "base-pack", "1.2")
    loaded = plugin_env.add(
        pack(arithmetic_rules(priority=100)), "override", "override-pack", "3.4"
    )
    rules = loaded.lowerings.rules_for(aten.exp.default)
    assert [(str(r.provenance), r.priority) for r in rules] == [
        ("override-pack 3.4", 100),
        ("base-pack 1.2", 0),
    ]
    assert rules[0].qualname == "fixture_packs.arithmetic_rules.<locals>.exp"
    assert rules[0].location.endswith(".py:" + rules[0].location.rsplit(":", 1)[1])


def test_same_op_same_priority_from_two_packs_is_an_error_naming_both(plugin_env):
    plugin_env.add(pack(arithmetic_rules()), "first", "first-pack", "1.0")
    plugins.register(pack(arithmetic_rules()), "second", "second-pack", "2.0")
    plugin_env.names.append("second")
    with pytest.raises(PluginConflictError) as err:
        plugins.reload()
    message = str(err.value)
    assert "aten::add.Tensor is lowered at priority 0 by both" in message
    assert "first-pack 1.0" in message and "second-pack 2.0" in message


def test_declined_node_goes_to_the_next_provider_then_to_cpu(plugin_env):
    plugin_env.add(pack(arithmetic_rules()), "base-like", "base-pack", "1.0")
    plugin_env.add(pack(declining_rules(priority=10)), "picky", "picky-pack", "1.0")
    x = torch.randn(8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        out = torch.compile(torch.exp, backend="nkipy")(x)  # base-pack's exp takes it: no fallback
    torch.testing.assert_close(out, torch.exp(x))

    plugins.unregister("base-like")
    plugin_env.names.remove("base-like")
    plugins.reload()
    torch._dynamo.reset()
    with pytest.warns(
        FallbackWarning,
        match=r"aten::exp.default runs on CPU: .*exp_only_big declined: only lowers",
    ):
        out = torch.compile(torch.exp, backend="nkipy")(x)
    torch.testing.assert_close(out, torch.exp(x))


def _broken_registration():
    @hookimpl
    def nkipy_register_lowerings(registry):
        raise RuntimeError("pack is broken")

    return types.SimpleNamespace(nkipy_register_lowerings=nkipy_register_lowerings)


def test_plugin_failing_to_register_is_skipped_and_reported(plugin_env, caplog):
    plugin_env.add(pack(arithmetic_rules()), "good", "good-pack", "1.0")
    with caplog.at_level(logging.WARNING, logger="nkipy.plugins"):
        loaded = plugin_env.add(_broken_registration(), "broken", "broken-pack", "0.1")
    (bad,) = loaded.failed()
    assert bad.name == "broken" and "RuntimeError: pack is broken" in bad.error
    assert "nkipy plugin 'broken' (broken-pack 0.1) skipped" in caplog.text
    assert loaded.lowerings.rules_for(aten.exp.default)  # the good pack still works
    with pytest.raises(
        PluginError, match=r"plugin 'broken' \(broken-pack 0.1\) failed to register"
    ):
        plugins.reload(strict=True)


@pytest.fixture
def fake_distribution(tmp_path, monkeypatch):
    """An installed-looking third-party pack: a dist-info with an `nkipy` entry point on sys.path."""
    site = tmp_path / "site"
    (site / "thirdparty_pack-0.3.dist-info").mkdir(parents=True)
    (site / "thirdparty_pack-0.3.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: thirdparty-pack\nVersion: 0.3\n"
    )
    (site / "thirdparty_pack-0.3.dist-info" / "entry_points.txt").write_text(
        "[nkipy]\nthirdparty = thirdparty_pack\nexploding = exploding_pack\n"
    )
    (site / "thirdparty_pack.py").write_text(
        textwrap.dedent("""
        import torch
        from nkipy_core import hookimpl, knp

        @hookimpl
        def nkipy_register_lowerings(registry):
            registry.register(torch.ops.aten.sigmoid.default, lambda ctx, x: knp.sigmoid(x))
    """)
    )
    (site / "exploding_pack.py").write_text("raise ImportError('needs libfoo.so')\n")
    monkeypatch.syspath_prepend(str(site))
    yield
    for name in ("thirdparty_pack", "exploding_pack"):
        sys.modules.pop(name, None)


def test_entry_point_discovery_of_a_third_party_pack(fake_distribution, monkeypatch):
    real = plugins._entry_point_candidates
    ours = {"nkipy-core", "thirdparty-pack"}  # whatever else is installed stays out of the way
    monkeypatch.setattr(
        plugins,
        "_entry_point_candidates",
        lambda: [c for c in real() if c.provenance.distribution in ours],
    )
    loaded = plugins.reload()
    try:
        status = {s.name: s for s in loaded.statuses}
        assert (
            status["thirdparty"].ok
            and str(status["thirdparty"].provenance) == "thirdparty-pack 0.3"
        )
        (rule,) = loaded.lowerings.rules_for(aten.sigmoid.default)
        assert rule.provenance.distribution == "thirdparty-pack"
        assert not status["exploding"].ok
        assert status["exploding"].error == "import: ImportError: needs libfoo.so"
        x = torch.randn(5)
        torch.testing.assert_close(
            torch.compile(torch.sigmoid, backend="nkipy")(x), torch.sigmoid(x)
        )
        with pytest.raises(PluginError, match="needs libfoo.so"):
            plugins.reload(strict=True)
    finally:
        monkeypatch.undo()
        plugins.reload()


@pytest.mark.parametrize(
    ("probes", "present"),
    [
        ("broken = hw_probes:broken\nabsent = hw_probes:absent\n", False),
        ("broken = hw_probes:broken\npresent = hw_probes:present\n", True),
    ],
)
def test_hardware_probes_answer_without_loading_plugins(
    tmp_path, monkeypatch, caplog, probes, present
):
    """``torch.nkipy.is_available()`` asks the ``nkipy.hardware`` probes, not the plugins: a
    broken probe is logged and counts as no hardware."""
    site = tmp_path / "site"
    (site / "hw_pack-1.0.dist-info").mkdir(parents=True)
    (site / "hw_pack-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hw-pack\nVersion: 1.0\n"
    )
    (site / "hw_pack-1.0.dist-info" / "entry_points.txt").write_text("[nkipy.hardware]\n" + probes)
    (site / "hw_probes.py").write_text(
        "def broken():\n    raise OSError('no /dev/neuron0')\n"
        "def absent():\n    return False\n"
        "def present():\n    return True\n"
    )
    monkeypatch.syspath_prepend(str(site))
    plugins.hardware_present.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="nkipy.plugins"):
            assert plugins.hardware_present() is present
        assert "nkipy hardware probe 'broken' failed: OSError: no /dev/neuron0" in caplog.text
    finally:
        sys.modules.pop("hw_probes", None)
        plugins.hardware_present.cache_clear()


def test_configure_and_graph_pass_hooks_are_called(plugin_env):
    seen = {}

    @hookimpl
    def nkipy_configure(config):
        seen["config"] = config

    @hookimpl
    def nkipy_graph_passes(stage):
        def count_exps(gm):
            seen.setdefault("exps", []).append(
                sum(n.target is aten.exp.default for n in gm.graph.nodes)
            )

        return [count_exps] if stage == "aten" else None

    plugin_env.add(
        types.SimpleNamespace(
            nkipy_configure=nkipy_configure, nkipy_graph_passes=nkipy_graph_passes
        ),
        "hooks",
    )
    from nkipy_core import init_nkipy_backend

    cfg = init_nkipy_backend(nkipy_cache="hooked")
    assert seen["config"] is cfg
    with pytest.warns(FallbackWarning):
        torch.compile(lambda x: torch.exp(x).exp(), backend="nkipy")(torch.randn(3))
    assert seen["exps"] == [2]


def test_a_lowered_op_is_not_decomposed_and_decompositions_can_be_added(plugin_env, monkeypatch):
    from fixture_packs import RuleSet, knp

    rules = RuleSet()
    rules.register(aten.silu.default)(lambda ctx, x: x * knp.sigmoid(x))

    @hookimpl
    def nkipy_register_decompositions(registry):
        registry.add(aten.tanh.default, lambda x: 2 * torch.sigmoid(2 * x) - 1)

    plugin_env.add(pack(rules, nkipy_register_decompositions=nkipy_register_decompositions), "silu")
    graphs = []
    from nkipy_core.compiler import pipeline as compiler

    real = compiler.compile_graph

    def spy(gm, inputs, cfg):
        graphs.append(
            {n.target for n in gm.graph.nodes if n.op == "call_function"}
        )  # before fusion
        return real(gm, inputs, cfg)

    monkeypatch.setattr("nkipy_core.dynamo.backend.compile_graph", spy)
    x = torch.randn(6)
    with pytest.warns(FallbackWarning) as record:
        out = torch.compile(lambda a: torch.nn.functional.silu(a) + torch.tanh(a), backend="nkipy")(
            x
        )
    torch.testing.assert_close(out, torch.nn.functional.silu(x) + torch.tanh(x))
    targets = graphs[0]
    assert aten.silu.default in targets  # lowered directly: its decomposition was dropped
    assert aten.tanh.default not in targets  # the pack's decomposition replaced it
    assert "aten::sigmoid.default" in " ".join(str(w.message) for w in record)
