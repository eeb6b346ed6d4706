"""The examples of examples/hf_llama are scripts that import each other: put their folder on the path."""

import os
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples" / "hf_llama"
sys.path.insert(0, str(EXAMPLES))


@pytest.fixture
def nki_overrides() -> bool:
    """Whether the NKI overrides are on (tox env ``all``): RMSNorm and softmax are then custom
    calls, with which the decoder layers of an inference graph are not recognised as repeated,
    so each such graph is one kernel (as with ``dedup_layers=False``); without them the layers
    share one kernel."""
    return os.environ.get("NKIPY_NKI_OVERRIDES") == "1"
