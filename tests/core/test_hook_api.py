"""The versioned hook API: packs declare the hook API range they support; a pack whose range
excludes this core's is reported as incompatible, never imported, and the others still load."""

import sys

import pytest
from fake_dists import write_distribution
from fixture_packs import arithmetic_rules, pack
from nkipy_cli import by, run, run_json

from nkipy_core import PluginError
from nkipy_core.plugin import manager as plugins
from nkipy_core.plugin.hook_api import HOOK_API_VERSION, incompatibility

FUTURE = ">=99.0"


def test_the_core_s_version_is_in_the_range_our_packs_declare():
    assert incompatibility(">=1.0,<2") == ""
    assert incompatibility(None) == ""  # packs from before the hook API was versioned still load


def test_a_range_that_excludes_the_core_says_both_versions_and_what_to_do():
    reason = incompatibility(FUTURE)
    assert (
        f"supports nkipy hook API {FUTURE}, and this nkipy-core provides {HOOK_API_VERSION}"
        in reason
    )
    assert "install a release of the pack made for this hook API" in reason
    assert "is not a version range" in incompatibility("one point oh")


def test_an_incompatible_in_process_pack_is_skipped_and_the_others_load(plugin_env, capsys):
    old = pack(arithmetic_rules())
    old.NKIPY_HOOK_API = FUTURE
    plugin_env.add(old, "future", "future-pack", "3.0")
    loaded = plugin_env.add(pack(arithmetic_rules(priority=5)), "current", "current-pack", "1.0")
    (future,) = loaded.failed()
    assert future.name == "future" and future.incompatible and future.hook_api == FUTURE
    assert [
        str(r.provenance)
        for r in loaded.lowerings.rules_for(__import__("torch").ops.aten.exp.default)
    ] == ["current-pack 1.0"]
    data = run_json(capsys, "list")
    row = by(data["plugins"], "name", "future")
    assert row["status"] == "incompatible" and row["hook_api"] == FUTURE
    assert f"this nkipy-core provides {HOOK_API_VERSION}" in row["error"]
    code, out, _ = run(capsys, "list")
    assert code == 0
    assert "1 plugin(s) were skipped (failed or incompatible)" in out
    (line,) = [line for line in out.splitlines() if line.startswith("future ")]
    assert "future-pack" in line and FUTURE in line and "incompatible" in line


def test_strict_mode_makes_an_incompatible_pack_an_error(plugin_env):
    old = pack(arithmetic_rules())
    old.NKIPY_HOOK_API = FUTURE
    with pytest.raises(
        PluginError, match=r"plugin 'future' \(future-pack 3.0\) was not loaded: it supports"
    ):
        plugin_env.add(old, "future", "future-pack", "3.0", strict=True)


@pytest.fixture
def future_site(tmp_path, monkeypatch):
    """An installed pack written for a future hook API whose import would fail on this core."""
    site = tmp_path / "site"
    site.mkdir()
    write_distribution(
        site,
        "futurepack",
        "futurepack_plugin",
        f"""
        from nkipy_core import a_hook_from_the_future  # ImportError here: it must never run

        NKIPY_HOOK_API = "{FUTURE}"
    """,
    )
    monkeypatch.syspath_prepend(str(site))
    real = plugins._entry_point_candidates
    monkeypatch.setattr(
        plugins,
        "_entry_point_candidates",
        lambda: [c for c in real() if c.provenance.distribution in {"nkipy-core", "futurepack"}],
    )
    yield site
    monkeypatch.undo()
    sys.modules.pop("futurepack_plugin", None)
    plugins.reload()


def test_an_entry_point_pack_is_checked_from_its_source_before_it_is_imported(future_site, capsys):
    loaded = plugins.reload()
    (future,) = loaded.failed()
    assert future.incompatible and future.hook_api == FUTURE
    assert "ImportError" not in future.error and "this nkipy-core provides" in future.error
    assert "futurepack_plugin" not in sys.modules
    row = by(run_json(capsys, "list")["plugins"], "name", "futurepack")
    assert (row["status"], row["distribution"], row["hook_api"]) == (
        "incompatible",
        "futurepack",
        FUTURE,
    )
