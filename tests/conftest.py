"""Shared fixtures: every test compiles into its own kernel cache and starts with a clean dynamo."""

import pytest
import torch

from nkipy_core.compiler import pipeline as compiler
from nkipy_core.config import settings as config
from nkipy_core.device import registration, request

# the suites use the device: registered as a program that asked for it would find it (but not
# made the accelerator: tests that need that ask for it themselves)
registration.register()


@pytest.fixture(autouse=True)
def _isolated_backend(tmp_path, monkeypatch):
    """A fresh configuration (no device requested) whose cache is this test's temp dir; dynamo forgets earlier graphs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(request, "_requested", False)  # as config.reset() forgets a runtime
    config.reset()
    torch._dynamo.reset()
    yield
    config.reset()
    torch._dynamo.reset()


@pytest.fixture
def graphs(monkeypatch):
    """The graphs ``compile_graph`` returned, in order (forward, then backward), to count
    kernels and the nodes left on CPU."""
    seen = []

    def spy(gm, inputs, cfg):
        out = compiler.compile_graph(gm, inputs, cfg)
        seen.append(out)
        return out

    for caller in ("backend", "aot_cache"):  # a compile, and a hit compiled again
        monkeypatch.setattr(f"nkipy_core.dynamo.{caller}.compile_graph", spy)
    return seen


@pytest.fixture
def per_op(monkeypatch):
    """Eager ops run one kernel each (``NKIPY_EAGER_FUSION=0``): for tests of the single-op
    kernels' own caches and keys."""
    monkeypatch.setenv("NKIPY_EAGER_FUSION", "0")
    config.reset()
