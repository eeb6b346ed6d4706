"""Each new kernel graph of a compiled function says why (``nkipy_core.observe.recompiles``):
logged, recorded in ``<cache>/stats/recompiles.jsonl``, summarised by ``nkipy-ops explain``,
and bounded by ``max_kernels``."""

import json
import logging

import pytest
import torch
from fixture_packs import arithmetic_rules, pack
from torch._dynamo.exc import BackendCompilerFailed

from nkipy_core import ConfigurationError, RecompileLimitError, init_nkipy_backend
from nkipy_core.cli.main import main
from nkipy_core.observe import recompiles

CACHE = "nkipy_cache"  # the tests' default: ./nkipy_cache in each test's own directory


@pytest.fixture(autouse=True)
def arithmetic(plugin_env):
    return plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.0")


def scaled(x):
    return (torch.exp(x) * 2).mean([0]) + x.mean([0])


def said(record):
    return [f"{r['what']}: {r['new']} vs {r['old']}" for r in record["reasons"]]


def test_each_compile_names_the_input_that_changed_in_the_log_and_the_record(caplog):
    compiled = torch.compile(scaled, backend="nkipy")
    with caplog.at_level(logging.INFO, logger="nkipy"):
        for x in (
            torch.randn(2, 4),
            torch.randn(3, 4),
            torch.randn(5, 4),
            torch.randn(5, 4).double(),
        ):
            torch.testing.assert_close(compiled(x), scaled(x))
    records = recompiles.read(CACHE)
    assert [(r["kind"], r["compile"]) for r in records] == [
        ("dynamo graph", 1),
        ("dynamo graph", 2),  # dynamo made dim 0 dynamic: compiled for 3 at once
        ("size set", 3),
        ("dynamo graph", 4),
    ]
    assert {r["function"] for r in records} == {f"scaled ({__file__}:25)"}
    assert [said(r) for r in records] == [
        [],
        ["L_x_ dim 0: 3 vs 2"],
        ["L_x_ dim 0: 5 vs 3"],
        ["L_x_ dtype: float64 vs float32", "L_x_ dim 0: 5 vs 3"],
    ]
    assert records[2]["graph"].startswith("the forward graph of scaled (")
    logged = [r.getMessage() for r in caplog.records if r.name == "nkipy.recompiles"]
    assert len(logged) == 4 and all(r.levelno == logging.INFO for r in caplog.records[:1])
    assert logged[1] == (
        f"scaled ({__file__}:25) compiles kernel graph 2 (dynamo graph: scaled ({__file__}:25)): "
        "L_x_ dim 0: 3 vs 2"
    )


def test_a_new_stride_and_a_guard_on_a_global_are_named():
    compiled = torch.compile(scaled, backend="nkipy", dynamic=False)
    x = torch.randn(4, 4)
    compiled(x)
    compiled(x.t())
    assert said(recompiles.read(CACHE)[-1]) == ["L_x_ stride: (1, 4) vs (4, 1)"]

    global SCALE
    SCALE = 2.0

    def by_global(y):
        return torch.exp(y) * SCALE

    compiled = torch.compile(by_global, backend="nkipy")
    compiled(x)
    SCALE = 3.0
    torch.testing.assert_close(compiled(x), by_global(x))
    assert said(recompiles.read(CACHE)[-1]) == ["G_SCALE_: float64[] on cpu vs absent"]
    with torch.no_grad():  # grad mode is guarded, and no input differs
        compiled(x)
    assert said(recompiles.read(CACHE)[-1]) == [str(recompiles.SAME_INPUTS)]


def test_the_frames_after_a_graph_break_count_for_their_function():
    def broken(x):
        y = torch.exp(x)
        torch._dynamo.graph_break()
        return y * 2

    compiled = torch.compile(broken, backend="nkipy", dynamic=False)
    compiled(torch.randn(3))
    compiled(torch.randn(4))
    records = recompiles.read(CACHE)
    assert {r["function"].split(" (")[0] for r in records} == {
        "test_the_frames_after_a_graph_break_count_for_their_function.<locals>.broken"
    }
    assert [r["compile"] for r in records] == [1, 2, 3, 4]
    assert len({r["graph"] for r in records}) == 2  # the function's frame and the resumed one


def test_past_max_kernels_a_new_size_set_raises_with_the_reasons_and_what_to_do():
    compiled = torch.compile(scaled, backend="nkipy", options={"max_kernels": 2})
    compiled(torch.randn(2, 4))
    compiled(torch.randn(3, 4))
    with pytest.raises(RecompileLimitError) as err:
        compiled(torch.randn(4, 4))  # a size set of the dynamic graph: raised at the call
    message = str(err.value)
    assert f"scaled ({__file__}:25) needs more than max_kernels=2 kernel graphs" in message
    assert "kernel graph 2 (dynamo graph: scaled (" in message and "L_x_ dim 0: 3 vs 2" in message
    assert "L_x_ dim 0: 4 vs 3" in message
    assert "torch._dynamo.mark_dynamic(x, dim)" in message
    assert "nkipy_core.buckets" in message and "NKIPY_MAX_KERNELS" in message


def test_past_max_kernels_a_new_dynamo_graph_fails_its_compile(monkeypatch):
    monkeypatch.setenv("NKIPY_MAX_KERNELS", "1")
    assert init_nkipy_backend().max_kernels == 1
    compiled = torch.compile(scaled, backend="nkipy")
    compiled(torch.randn(2, 4))
    with pytest.raises(BackendCompilerFailed) as err:
        compiled(torch.randn(2, 4).double())
    assert isinstance(err.value.inner_exception, RecompileLimitError)
    assert "L_x_ dtype: float64 vs float32" in str(err.value.inner_exception)


def test_a_new_compile_of_the_function_starts_counting_again():
    for _ in range(2):
        torch.compiler.reset()
        compiled = torch.compile(scaled, backend="nkipy", options={"max_kernels": 1})
        compiled(torch.randn(2, 4))
    assert [r["compile"] for r in recompiles.read(CACHE)] == [1, 1]


def test_max_kernels_is_checked():
    with pytest.raises(ConfigurationError, match="max_kernels must be a positive integer, got 0"):
        init_nkipy_backend(max_kernels=0)


def test_explain_groups_the_reasons_per_function(capsys):
    compiled = torch.compile(scaled, backend="nkipy")
    for rows in (2, 3, 5, 6):
        compiled(torch.randn(rows, 4))
    compiled(torch.randn(6, 4).double())

    assert main(["explain", CACHE]) == 0
    out = capsys.readouterr().out
    assert "5 kernel graphs of 1 function" in out
    assert f"scaled ({__file__}:25): 5 kernel graphs (3 dynamo graphs, 2 size sets)" in out
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    assert rows["first compile"].split()[2] == "1"
    assert rows["L_x_ dim 0"].split()[3:] == [
        "4",
        "3",
        "vs",
        "2,",
        "5",
        "vs",
        "3,",
        "6",
        "vs",
        "5,",
        "6",
        "vs",
        "3",
    ]
    assert rows["L_x_ dtype"].split()[2:] == ["1", "float64", "vs", "float32"]

    assert main(["explain", CACHE, "--format", "json"]) == 0
    (function,) = json.loads(capsys.readouterr().out)["functions"]
    assert function["kernel_graphs"] == 5
    assert function["kinds"] == {"dynamo graph": 3, "size set": 2}
    assert [(r["what"], r["compiles"]) for r in function["reasons"]] == [
        ("first compile", 1),
        ("L_x_ dim 0", 4),
        ("L_x_ dtype", 1),
    ]


def test_explain_reads_the_last_run_unless_asked_for_all(tmp_path, capsys):
    lines = [
        {
            "rank": 0,
            "pid": pid,
            "function": "f",
            "graph": "f",
            "kind": "dynamo graph",
            "compile": 1,
            "reasons": [],
        }
        for pid in (10, 11)
    ]
    (tmp_path / "stats").mkdir()
    (tmp_path / "stats" / "recompiles.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines) + '{"truncated'
    )
    main(["explain", str(tmp_path), "--format", "json"])
    assert json.loads(capsys.readouterr().out)["runs"] == [{"rank": 0, "pid": 11}]
    main(["explain", str(tmp_path), "--all", "--format", "json"])
    assert json.loads(capsys.readouterr().out)["functions"][0]["kernel_graphs"] == 2


def test_explain_without_records_is_an_error(tmp_path, capsys):
    assert main(["explain", str(tmp_path)]) == 2
    assert "no compiles recorded under" in capsys.readouterr().err
