"""Shared fixtures: every test compiles into its own kernel cache and starts with a clean dynamo."""

import pytest
import torch

from nkipy_core import config


@pytest.fixture(autouse=True)
def _isolated_backend(tmp_path, monkeypatch):
    """A fresh configuration whose cache is this test's temp dir; dynamo forgets earlier graphs."""
    monkeypatch.chdir(tmp_path)
    config.reset()
    torch._dynamo.reset()
    yield
    config.reset()
    torch._dynamo.reset()
