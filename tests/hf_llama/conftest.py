"""The examples of examples/hf_llama are scripts that import each other: put their folder on the path."""

import sys
from pathlib import Path

EXAMPLES = Path(__file__).parents[2] / "examples" / "hf_llama"
sys.path.insert(0, str(EXAMPLES))
