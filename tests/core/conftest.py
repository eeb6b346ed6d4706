"""Hermetic plugin set-up for core tests: only nkipy-core's own plugins plus what a test adds.

Whatever packs happen to be installed, these tests see the same registries, so they can
register rules at priority 0 and assert on fallbacks without interference.
"""

import pytest

from nkipy_core.plugin import manager as plugins


class PluginEnv:
    def __init__(self):
        self.names = []

    def add(self, plugin, name, distribution="test-pack", version="1.0", strict=False):
        plugins.register(plugin, name, distribution, version)
        self.names.append(name)
        return plugins.reload(strict=strict)


@pytest.fixture
def plugin_env(monkeypatch):
    real = plugins._entry_point_candidates
    monkeypatch.setattr(
        plugins,
        "_entry_point_candidates",
        lambda: [c for c in real() if c.provenance.distribution == "nkipy-core"],
    )
    env = PluginEnv()
    plugins.reload()
    yield env
    for name in env.names:
        plugins.unregister(name)
    monkeypatch.undo()
    plugins.reload()
