"""`pip install nkipy-core` alone: it imports, lists nothing, and still runs models on CPU.

Runs only in the tox `core` environment, where no op pack is installed.
"""

import json
import subprocess
import sys
import textwrap


def run(*args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


def test_nkipy_ops_list_is_empty_but_healthy():
    result = run("nkipy-ops", "list", "--format", "json")
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    assert listing["lowerings"] == []
    assert [(p["name"], p["status"]) for p in listing["plugins"]] == [("cpu", "ok")]
    assert [(r["name"], r["available"]) for r in listing["runtimes"]] == [("cpu", True)]


def test_fresh_interpreter_compiles_a_model_without_importing_nkipy(tmp_path):
    program = textwrap.dedent("""
        import warnings, torch
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU())
        x = torch.randn(2, 8)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = torch.compile(model, backend="nkipy")(x)
        print(torch.allclose(out, model(x), atol=1e-6))
        for w in caught:
            if type(w.message).__name__ == "FallbackWarning":
                print(w.message)
    """)
    result = run(sys.executable, "-c", program, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "True"
    assert "nkipy: aten::addmm.default runs on CPU: no installed pack lowers it" in lines
    assert "nkipy: aten::sigmoid.default runs on CPU: no installed pack lowers it" in lines
