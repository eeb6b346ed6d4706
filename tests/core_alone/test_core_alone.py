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


def test_device_works_with_no_pack_by_running_ops_on_cpu(tmp_path):
    program = textwrap.dedent("""
        import warnings, torch, nkipy_core
        nkipy_core.register_device()
        x, w = torch.randn(3, 4), torch.randn(4, 2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = torch.relu(x.to("nkipy") @ w.to("nkipy")) + 1
        print(out.device, torch.allclose(out.cpu(), torch.relu(x @ w) + 1))
        for m in sorted({str(c.message) for c in caught if type(c.message).__name__ == "FallbackWarning"}):
            print(m)
    """)
    result = run(sys.executable, "-c", program, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "nkipy:0 True"
    assert lines[1:] == [
        f"nkipy: {op} runs on CPU: no installed pack lowers it; its result comes back to the nkipy device"
        for op in ("aten::add.Tensor", "aten::mm.default", "aten::relu.default")
    ]
