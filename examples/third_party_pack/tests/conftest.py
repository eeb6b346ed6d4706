"""Make the pack usable by the tests whether or not it is pip-installed."""

import sys
from pathlib import Path

import pytest
import torch

from nkipy_core.plugin import manager as plugins

try:
    import nkipy_ops_example  # noqa: F401 - installed (pip install -e .)
except ModuleNotFoundError:
    sys.path.insert(0, str(Path(__file__).parents[1] / "src"))

_registered_here = False


def pytest_configure(config):
    """Register the plugin module in-process unless its entry point already loaded it (before
    collection, so that ``conformance_cases("nkipy-ops-example")`` can parametrize tests)."""
    global _registered_here
    from nkipy_ops_example import plugin

    if not any(s.name == "nkipy_ops_example" and s.ok for s in plugins.get().statuses):
        plugins.register(
            plugin, name="nkipy_ops_example", distribution="nkipy-ops-example", version="0.1.0"
        )
        plugins.reload()
        _registered_here = True


def pytest_unconfigure(config):
    if _registered_here:
        plugins.unregister("nkipy_ops_example")
        plugins.reload()


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
