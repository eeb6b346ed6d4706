"""Profiling and progress: profiler events and counters per kernel, the last run's file and
``nkipy-ops stats``, the compile progress bar, and the log lines of compile decisions."""

import copy
import io
import json
import logging
import os
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest
import torch
from fixture_packs import arithmetic_rules, pack
from fresh_python import python
from nkipy_cli import line_of, run, section

from nkipy_core import (
    hookimpl,
    init_nkipy_backend,
    kernel_boundary,
    kernel_stats,
    reset_kernel_stats,
)
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.observe import profiling, progress
from nkipy_core.runtime.cpu import CpuRuntime


@pytest.fixture
def arithmetic(plugin_env):
    reset_kernel_stats()
    return plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.0")


def fn(x, y):
    return torch.exp(x) * x + y


def compiled_kernels(graphs):
    return [m for gm in graphs for m in gm.children() if isinstance(m, KernelCall)]


def test_each_kernel_call_is_a_profiler_event_named_for_its_kernel(arithmetic, graphs):
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    compiled = torch.compile(fn, backend="nkipy")
    compiled(x, y)
    (kernel,) = compiled_kernels(graphs)
    with torch.profiler.profile() as prof:
        out = compiled(x, y)
        compiled(x, y)
    torch.testing.assert_close(out, fn(x, y))
    name = f"nkipy_kernel_0 [{kernel.entry[:8]}] add, exp, mul"
    assert [e.name for e in prof.events() if e.name.startswith("nkipy_")] == [name, name]


def test_without_a_profiler_no_event_is_created(arithmetic, monkeypatch):
    def no_event(name):
        raise AssertionError(f"an event was created for {name} with no profiler recording")

    monkeypatch.setattr(profiling, "_Event", no_event)
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(torch.compile(fn, backend="nkipy")(x, y), fn(x, y))
    assert [s.calls for s in kernel_stats()] == [1]


def test_counters_count_calls_and_bytes_of_the_signature(arithmetic, graphs):
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    compiled = torch.compile(fn, backend="nkipy")
    for _ in range(3):
        compiled(x, y)
    (kernel,) = compiled_kernels(graphs)
    (stats,) = kernel_stats()
    assert (stats.key, stats.name, stats.ops) == (kernel.entry, "nkipy_kernel_0", "add, exp, mul")
    assert (stats.calls, stats.bytes_in, stats.bytes_out) == (3, 3 * 2 * 20 * 4, 3 * 20 * 4)
    assert stats.total_ns > 0 and stats.mean_us == pytest.approx(stats.total_ns / 3 / 1e3)


def test_reset_zeroes_the_counters_of_bound_kernels(arithmetic):
    compiled = torch.compile(fn, backend="nkipy")
    x, y = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    compiled(x, y)
    compiled(x, y)
    assert [s.calls for s in kernel_stats()] == [2]
    reset_kernel_stats()
    assert kernel_stats() == []
    compiled(x, y)
    (stats,) = kernel_stats()
    assert (stats.calls, stats.bytes_in, stats.bytes_out) == (1, 2 * 6 * 8, 6 * 8)


def test_kernels_are_listed_most_total_time_first(arithmetic, graphs):
    torch.compile(fn, backend="nkipy")(torch.randn(2), torch.randn(2))
    torch.compile(lambda x: torch.exp(x) * x, backend="nkipy")(torch.randn(2))
    first, second = compiled_kernels(graphs)
    first.stats.total_ns, second.stats.total_ns = 5, 7
    assert [(s.ops, s.total_ns) for s in kernel_stats()] == [("exp, mul", 7), ("add, exp, mul", 5)]


@pytest.mark.parametrize("fused", [False, True], ids=["per-op", "fused"])
def test_eager_ops_on_the_device_are_counted(arithmetic, fused):
    init_nkipy_backend(runtime="cpu", eager_fusion=fused)
    x = torch.ones(3, 4).to("nkipy")
    for _ in range(2):  # the first call compiles its kernel(s); the second reuses them
        y = (x + x) * x
        torch.testing.assert_close(y.cpu(), torch.full((3, 4), 2.0))
    rows = {s.name: (s.calls, s.bytes_in, s.bytes_out, s.ops) for s in kernel_stats()}
    if fused:  # queued, then run as one kernel of x where y is read
        assert rows == {"eager_fused": (2, 96, 96, "add, mul")}
    else:
        assert rows == {
            "eager_aten::add_Tensor": (2, 192, 96, "add"),
            "eager_aten::mul_Tensor": (2, 192, 96, "mul"),
        }


def test_op_summary_names_the_most_frequent_primitives_first():
    counts = {"add": 2, "exp": 1, "dot": 1, **{f"p{i}": 1 for i in range(5)}}
    assert profiling.op_summary(counts) == "add×2, dot, exp, p0, p1, p2, +2 more"
    assert profiling.op_summary({}) == ""


# -- the last run's file and nkipy-ops stats -----------------------------------------------------


def test_exit_writes_the_counters_under_the_cache(arithmetic, tmp_path, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    init_nkipy_backend(nkipy_cache=tmp_path / "cache")
    torch.compile(fn, backend="nkipy")(torch.randn(8), torch.randn(8))
    written = profiling.write_last_run()
    path = tmp_path / "cache" / "stats" / "last_run.json"
    assert path in written
    data = json.loads(path.read_text())
    assert (data["rank"], data["world_size"], data["pid"]) == (0, 1, os.getpid())
    assert [(k["name"], k["calls"], k["bytes_in"], k["ops"]) for k in data["kernels"]] == [
        ("nkipy_kernel_0", 1, 64, "add, exp, mul")
    ]
    assert not list(path.parent.glob(".last_run*")), "the temporary file was left behind"


SCRIPT = textwrap.dedent("""
    import sys, torch
    from fixture_packs import arithmetic_rules, pack
    from nkipy_core import init_nkipy_backend, plugins
    plugins.register(pack(arithmetic_rules(priority=100)), "arith", "arith-pack", "1.0")  # over installed packs
    plugins.reload()
    init_nkipy_backend(nkipy_cache=sys.argv[1])
    f = torch.compile(lambda x, y: torch.exp(x) * x + y, backend="nkipy")
    g = torch.compile(lambda x: torch.exp(x) * 2, backend="nkipy")
    x, y = torch.randn(16, 16), torch.randn(16, 16)
    for _ in range(3):
        f(x, y)
    g(x)
""")


@pytest.fixture
def last_run(tmp_path):
    """A cache into which a separate process ran two kernels (3 calls and 1) and exited."""
    cache = tmp_path / "cache"
    env = {
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
        ),
        "RANK": None,
        "WORLD_SIZE": None,
    }
    done = python(SCRIPT, str(cache), **env)
    assert done.returncode == 0, done.stderr
    return cache


def test_stats_prints_the_kernels_of_the_last_run(last_run, capsys):
    code, out, err = run(capsys, "stats", str(last_run))
    assert code == 0, err
    assert out.startswith(f"Kernel statistics of the last run in {last_run}: rank 0 (pid ")
    table = section(out, "Kernels")
    header, _, first, second = table.splitlines()
    assert header.split() == [
        "key",
        "name",
        "calls",
        "total",
        "ms",
        "mean",
        "µs",
        "bytes",
        "in",
        "bytes",
        "out",
        "ops",
    ]
    rows = [first.split(), second.split()]
    f_row = next(r for r in rows if r[2] == "3")
    g_row = next(r for r in rows if r[2] == "1")
    assert f_row[1] == g_row[1] == "nkipy_kernel_0"
    assert f_row[5:] == [
        "6.0",
        "KiB",
        "3.0",
        "KiB",
        "add,",
        "exp,",
        "mul",
    ]  # 3 calls x 2 x 16x16 f32 in
    assert g_row[5:] == ["1.0", "KiB", "1.0", "KiB", "broadcast,", "exp,", "mul"]
    total_ms = [float(r[3]) for r in rows]
    assert total_ms == sorted(total_ms, reverse=True)


def test_stats_json_and_sort(last_run, capsys):
    code, out, err = run(capsys, "stats", str(last_run), "--format", "json", "--sort", "calls")
    assert code == 0, err
    report = json.loads(out)
    assert report["cache"] == str(last_run)
    assert [(r["rank"], r["world_size"]) for r in report["runs"]] == [(0, 1)]
    assert [(k["calls"], k["bytes_in"], k["bytes_out"], k["ops"]) for k in report["kernels"]] == [
        (3, 3 * 2048, 3 * 1024, "add, exp, mul"),
        (1, 1024, 1024, "broadcast, exp, mul"),
    ]
    for k in report["kernels"]:
        assert len(k["key"]) == 64 and k["total_ns"] > 0
        assert k["mean_us"] == pytest.approx(k["total_ns"] / k["calls"] / 1e3)


def test_stats_without_a_recorded_run_is_a_clear_error(tmp_path, capsys):
    code, out, err = run(capsys, "stats", str(tmp_path))
    assert (code, out) == (2, "")
    assert err == (
        f"nkipy-ops: error: no kernel statistics under {tmp_path}: run a program with "
        f"nkipy_cache={tmp_path} first\n"
    )


def test_stats_sums_the_ranks_of_the_last_run_or_shows_one(
    arithmetic, tmp_path, monkeypatch, capsys
):
    cache = tmp_path / "cache"
    init_nkipy_backend(nkipy_cache=cache)
    compiled = torch.compile(fn, backend="nkipy")
    x = torch.randn(8)
    monkeypatch.setenv("WORLD_SIZE", "1")
    compiled(x, x)
    profiling.write_last_run()  # an earlier single-process run: replaced by the ranks' below
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, calls in ((0, 2), (1, 3)):
        reset_kernel_stats()
        for _ in range(calls):
            compiled(x, x)
        monkeypatch.setenv("RANK", str(rank))
        profiling.write_last_run()
    assert sorted(p.name for p in (cache / "stats").glob("last_run*")) == [
        "last_run.json",
        "last_run.rank0.json",
        "last_run.rank1.json",
    ]
    code, out, _ = run(capsys, "stats", str(cache))
    assert code == 0
    assert ": rank 0 (pid" in out and "), rank 1 (pid" in out
    assert line_of(section(out, "Kernels"), kernel_key(cache)[:12])[2] == "5"
    code, out, _ = run(capsys, "stats", str(cache), "--rank", "1")
    assert line_of(section(out, "Kernels"), kernel_key(cache)[:12])[2] == "3"
    code, _, err = run(capsys, "stats", str(cache), "--rank", "4")
    assert code == 2 and "has no rank 4; its ranks: [0, 1]" in err


def kernel_key(cache):
    (entry,) = (cache / "kernels").iterdir()
    return entry.name


# -- compile progress ----------------------------------------------------------------------------


class SlowCpu(CpuRuntime):
    """The cpu runtime with a compiler that takes its time, like neuronx-cc."""

    name = "slowcpu"
    priority = -1
    seconds = 0.3

    def compile(self, kernel, options):
        time.sleep(self.seconds)
        return super().compile(kernel, options)


@pytest.fixture
def slow_runtime(arithmetic, plugin_env):
    @hookimpl
    def nkipy_register_runtimes(registry):
        registry.register(SlowCpu())

    plugin_env.add(
        types.SimpleNamespace(nkipy_register_runtimes=nkipy_register_runtimes), "slow", "slow-pack"
    )


def three_kernels(x):
    a = kernel_boundary(torch.exp(x) * x)
    b = kernel_boundary(a * a + x)
    return b * 2 + a


class Terminal(io.StringIO):
    def isatty(self):
        return True


def compile_three(monkeypatch, stderr, show_after):
    monkeypatch.setattr(progress, "SHOW_AFTER", show_after)
    monkeypatch.setattr(sys, "stderr", stderr)
    x = torch.linspace(-1, 1, 5)
    compiled = torch.compile(three_kernels, backend="nkipy", options={"runtime": "slowcpu"})
    torch.testing.assert_close(compiled(x), three_kernels(x))
    return stderr.getvalue()


def test_a_slow_batch_on_a_terminal_shows_a_progress_bar(slow_runtime, monkeypatch):
    text = compile_three(monkeypatch, Terminal(), show_after=0.2)
    frames = text.split("\r")
    assert any(
        f.startswith("nkipy: compiling for slowcpu:   0%|") and "0/3" in f for f in frames
    ), text
    assert any(
        f.startswith("nkipy: compiling for slowcpu: 100%|") and "3/3" in f for f in frames
    ), text
    assert "kernel(s) for slowcpu" not in text  # the bar, not the lines


def test_a_slow_batch_elsewhere_prints_lines(slow_runtime, monkeypatch):
    text = compile_three(monkeypatch, io.StringIO(), show_after=0.2)
    lines = text.splitlines()
    assert lines[0].startswith("nkipy: compiling 3 kernel(s) for slowcpu: 0/3 done, 0.")
    assert lines[-1].startswith("nkipy: compiling 3 kernel(s) for slowcpu: 3/3 done, ")
    assert "%|" not in text


def test_fast_compiles_print_nothing_even_on_a_terminal(slow_runtime, monkeypatch):
    monkeypatch.setattr(SlowCpu, "seconds", 0.0)
    assert compile_three(monkeypatch, Terminal(), show_after=2.0) == ""


# -- log lines -----------------------------------------------------------------------------------


def test_compile_cache_and_fallback_decisions_are_logged(arithmetic, caplog):
    def with_fallback(x):
        return torch.tanh(torch.exp(x) * x)

    x = torch.randn(4)
    with caplog.at_level(logging.DEBUG, logger="nkipy"):
        with pytest.warns(UserWarning, match="tanh"):
            torch.compile(with_fallback, backend="nkipy")(x)
        cold = [r.getMessage() for r in caplog.records if r.name.startswith("nkipy")]
        caplog.clear()
        torch._dynamo.reset()
        with pytest.warns(
            UserWarning, match="tanh"
        ):  # torch's AOTAutograd cache: the graph rebuilt
            torch.compile(with_fallback, backend="nkipy")(x)
        restored = [r.getMessage() for r in caplog.records if r.name.startswith("nkipy")]
        caplog.clear()
        torch._dynamo.reset()
        with (
            pytest.warns(UserWarning, match="tanh"),
            torch._functorch.config.patch(enable_autograd_cache=False),
        ):
            torch.compile(with_fallback, backend="nkipy")(
                x
            )  # compiled again, from the kernel cache
        warm = [r.getMessage() for r in caplog.records if r.name.startswith("nkipy")]
    assert "planned a graph for cpu: 2 op(s) lowered, 1 on CPU" in cold
    assert "fallback: aten::tanh.default runs on CPU: no installed pack lowers it" in cold
    assert any(m.startswith("nkipy cache: miss for kernel ") for m in cold)
    assert any(m.startswith("compiled kernel nkipy_kernel_0 (exp, mul) for cpu in ") for m in cold)
    assert (
        "a graph of 1 kernel(s) rebuilt from torch's AOTAutograd cache without compiling it"
        in restored
    )
    assert not any(m.startswith("plan of a graph") for m in restored)
    assert "plan of a graph of 3 op(s) for cpu reused from the cache" in warm
    for messages in (restored, warm):
        assert any(
            m.startswith("nkipy cache: hit for kernel ")
            and m.endswith("(nkipy_kernel_0, cpu; sealed)")
            for m in messages
        )


def test_a_copied_graph_counts_into_the_same_record(arithmetic, graphs):
    x, y = torch.randn(3), torch.randn(3)
    torch.compile(fn, backend="nkipy")(x, y)
    twin = copy.deepcopy(graphs[0])
    torch.testing.assert_close(twin(x, y)[0], fn(x, y))
    assert [s.calls for s in kernel_stats()] == [2]
