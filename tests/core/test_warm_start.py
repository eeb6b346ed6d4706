"""Warm starts: a new process with warm caches skips AOTAutograd's trace (torch's AOTAutograd
cache) and lowering (nkipy's kernel cache), and computes what the cold process computed."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).parent

# Runs one case in a fresh process on the caches under argv[1] and prints what it observed.
# Only nkipy-core's own plugins plus the test pack are loaded, so the fallbacks are known.
PROGRAM = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np, torch
    sys.path.insert(0, {here!r})
    from fixture_packs import arithmetic_rules, pack
    import nkipy_core
    from nkipy_core import cache_stats, knp, plugins
    from nkipy_core.ir import DType

    real = plugins._entry_point_candidates
    plugins._entry_point_candidates = lambda: [c for c in real() if c.provenance.distribution == "nkipy-core"]
    rules = arithmetic_rules()

    @rules.register(torch.ops.aten.rand_like.default)
    def rand_like(ctx, x, **_):
        top = knp.floor_divide(ctx.random_bits(ctx.out.shape), np.uint32(256))
        return knp.multiply(knp.astype(top, DType.f32), 2.0 ** -24)

    plugins.register(pack(rules), "arith", "arith-pack", "1.0")
    plugins.reload()
    case, cache, options = sys.argv[2], sys.argv[1], json.loads(sys.argv[3])

    def compiled(fn, **kwargs):
        return torch.compile(fn, backend="nkipy", options={{"nkipy_cache": cache, **options}}, **kwargs)

    def close(a, b):
        return bool(torch.allclose(a, b, rtol=1e-5, atol=1e-6))

    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    report = {{}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case == "inference":
            fn = lambda a: torch.exp(a) * a + 1
            report["ok"] = close(compiled(fn)(x), fn(x))
        elif case == "cpu_region":  # the same dynamo graph as "inference", its ops kept on CPU
            def fn(a):
                with nkipy_core.on_cpu():
                    return torch.exp(a) * a + 1
            report["ok"] = close(compiled(fn)(x), fn(x))
        elif case == "dynamic":
            fn = lambda a: torch.exp(a) * a + 1
            report["ok"] = close(compiled(fn, dynamic=True)(x), fn(x))
        elif case == "on_device":
            nkipy_core.register_device()
            fn = lambda a: torch.exp(a) * a + 1
            out = compiled(fn)(x.to("nkipy"))
            report["ok"] = out.device.type == "nkipy" and close(out.cpu(), fn(x))
        elif case == "training":
            w = torch.linspace(0.5, 1.5, 4, requires_grad=True)
            fn = lambda a, w: (torch.exp(a * w) * a).mean()
            loss = compiled(fn)(x, w)
            loss.backward()
            grad, w.grad = w.grad, None
            expected = fn(x, w)
            expected.backward()
            report["ok"] = close(loss, expected) and close(grad, w.grad)
        elif case == "constant":  # a tensor constant: a get_attr node of the compiled graph
            fn = lambda a: a * torch.tensor([1.0, 2.0, 3.0, 4.0]) + 1
            report["ok"] = close(compiled(fn)(x), fn(x))
        elif case == "fallback":
            fn = lambda a: torch.sin(torch.exp(a)) * a
            report["ok"] = close(compiled(fn)(x), fn(x))
        elif case == "random":
            fn = compiled(lambda a: torch.rand_like(a) * 2 + a)
            torch.manual_seed(0)
            first, second = fn(x), fn(x)
            report["ok"] = not torch.equal(first, second) and bool(((first - x >= 0) & (first - x < 2)).all())
            report["values"] = first.tolist() + second.tolist()
        elif case == "mutation":
            def fn(a, b):
                a.mul_(2)
                return a + b
            a, expected_a = x.clone(), x.clone()
            out = compiled(fn)(a, x)
            expected = fn(expected_a, x)
            # written in the graph, called directly: its version moves as the op's would
            report["ok"] = close(out, expected) and close(a, expected_a) and a._version > 0
    report["fallbacks"] = sorted({{str(w.message).split(" runs on CPU")[0] for w in caught
                                  if issubclass(w.category, nkipy_core.FallbackWarning)}})
    report["nkipy"] = dict(cache_stats)
    report["torch"] = dict(torch._dynamo.utils.counters["aot_autograd"])
    print(json.dumps(report))
""").format(here=str(HERE))


def run(case: str, root: Path, **options) -> dict:
    """``case`` in a new process on the caches under ``root``, with nkipy ``options``."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(root / "torch")}
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(root / "nkipy"), case, json.dumps(options)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cold_and_warm(case: str, root: Path) -> tuple[dict, dict]:
    cold = run(case, root)
    warm = run(case, root)
    assert cold["ok"] and warm["ok"], (cold, warm)
    assert cold["torch"].get("autograd_cache_saved") == 1, cold
    assert cold["nkipy"]["aot_cache_misses"] == 1 and cold["nkipy"]["aot_cache_saved"] == 1
    assert cold["nkipy"]["lowered_kernels"] >= 1
    assert warm["torch"].get("autograd_cache_hit") == 1, warm  # AOTAutograd did not trace
    assert "autograd_cache_miss" not in warm["torch"]
    assert warm["nkipy"]["aot_cache_hits"] == 1
    # the graph compile_graph made was rebuilt from its stored form, not compiled again
    assert (
        warm["nkipy"]["aot_cache_restored"] == 1 and "aot_cache_recompiled" not in warm["nkipy"]
    ), warm
    # the kernels came from nkipy's cache: nothing planned or lowered
    assert "lowered_kernels" not in warm["nkipy"] and "planned_nodes" not in warm["nkipy"], warm
    assert warm["nkipy"]["hits"] == cold["nkipy"]["misses"]
    assert warm["fallbacks"] == cold["fallbacks"]
    # called with or without AOTAutograd's runtime wrapper, as the cold process decided
    for way in ("direct_graphs", "wrapped_graphs"):
        assert warm["nkipy"].get(way) == cold["nkipy"].get(way), (cold, warm)
    return cold, warm


@pytest.mark.parametrize("case", ["inference", "on_device", "mutation"])
def test_warm_process_hits_both_caches_and_matches_eager(case, tmp_path):
    cold, warm = cold_and_warm(case, tmp_path)
    assert cold["fallbacks"] == []
    assert cold["nkipy"].get("direct_graphs") == 1, cold
    assert warm["nkipy"].get("direct_graphs") == 1, warm


def test_a_tensor_constant_is_stored_with_the_compiled_graph(tmp_path):
    cold, warm = cold_and_warm("constant", tmp_path)
    # the test pack does not lower the copy torch makes of the constant: it runs on CPU, warm too
    assert warm["fallbacks"] == ["nkipy: aten::lift_fresh_copy.default"]


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_a_kernel_gone_from_the_kernel_cache_is_lowered_again_on_a_hit(damage, tmp_path):
    """torch's entry names the kernel by its nkipy cache key; without that entry the hit compiles
    the ATen graph stored beside it, which lowers and compiles the kernel again."""
    cold = run("fallback", tmp_path)  # two kernels (exp, mul) around the sin left on CPU
    entries = sorted((tmp_path / "nkipy" / "kernels").iterdir())
    assert len(entries) == 2
    entry = entries[0]
    if damage == "deleted":
        shutil.rmtree(entry)
    else:
        (entry / "kernel.py").write_text("garbage")
    warm = run("fallback", tmp_path)
    assert cold["ok"] and warm["ok"], (cold, warm)
    assert warm["torch"].get("autograd_cache_hit") == 1 and warm["nkipy"]["aot_cache_hits"] == 1, (
        warm
    )
    assert (
        warm["nkipy"]["aot_cache_recompiled"] == 1 and "aot_cache_restored" not in warm["nkipy"]
    ), warm
    # only the damaged kernel is lowered and compiled again; the other comes from the cache
    assert warm["nkipy"]["lowered_kernels"] == 1 and warm["nkipy"]["compiled_kernels"] == 1, warm
    assert warm["nkipy"].get("corrupt", 0) == (damage == "corrupt")
    assert warm["fallbacks"] == cold["fallbacks"] == ["nkipy: aten::sin.default"]
    assert warm["nkipy"]["fallback_ops"] == 1  # warned once, by the compile, not by the restore too
    assert run("fallback", tmp_path)["nkipy"]["aot_cache_restored"] == 1  # the kernel is back


def test_training_warm_starts_from_the_kernel_cache_only(tmp_path):
    """torch compiles the backward at the first ``backward()``, after the compile that writes an
    AOTAutograd entry, so a training graph is not in that cache; nothing is lowered again."""
    cold, warm = run("training", tmp_path), run("training", tmp_path)
    assert cold["ok"] and warm["ok"], (cold, warm)
    assert "autograd_cache_saved" not in cold["torch"] and "aot_cache_hits" not in warm["nkipy"]
    assert cold["nkipy"]["lowered_kernels"] == 2  # forward and backward
    assert "lowered_kernels" not in warm["nkipy"] and warm["nkipy"]["hits"] == 2, warm


def test_fallback_ops_still_warn_on_a_hit(tmp_path):
    cold, warm = cold_and_warm("fallback", tmp_path)
    assert warm["fallbacks"] == ["nkipy: aten::sin.default"]
    assert warm["nkipy"]["fallback_ops"] == 1


def test_random_ops_draw_the_same_numbers_after_a_hit(tmp_path):
    cold, warm = cold_and_warm("random", tmp_path)
    assert cold["fallbacks"] == []  # rand_like ran in the kernel, keyed from torch's generator
    assert warm["values"] == cold["values"]
    assert warm["nkipy"]["random_keys"] == cold["nkipy"]["random_keys"] == 2


def test_graphs_with_symbolic_sizes_bypass_the_cache_and_count_it(tmp_path):
    for run_ in (run("dynamic", tmp_path), run("dynamic", tmp_path)):
        assert run_["ok"]
        assert (
            run_["nkipy"]["aot_cache_bypasses"] == 1 and "aot_cache_saved" not in run_["nkipy"]
        ), run_
        assert run_["nkipy"]["specializations"] == 1
    assert "lowered_kernels" not in run_["nkipy"]  # the second process still found its kernels


def test_what_changes_the_compiled_graphs_changes_the_key(tmp_path):
    assert run("inference", tmp_path)["nkipy"]["aot_cache_saved"] == 1
    # the same dynamo graph (torch's part of the key) but its ops in a CPU region: no kernels
    region = run("cpu_region", tmp_path)
    assert (
        region["ok"]
        and region["nkipy"]["aot_cache_misses"] == 1
        and "misses" not in region["nkipy"]
    ), region
    other_option = run("inference", tmp_path, fallback_random=True)
    assert other_option["ok"] and other_option["nkipy"]["aot_cache_misses"] == 1
    assert run("inference", tmp_path)["nkipy"]["aot_cache_hits"] == 1


PASS_PROGRAM = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, sys.argv[2])
    import passpack
    from nkipy_core import cache_stats, plugins
    plugins.register(passpack, "passpack", "pass-pack", "1.0")
    plugins.reload()
    out = torch.compile(torch.exp, backend="nkipy", options={"nkipy_cache": sys.argv[1]})(torch.ones(3))
    print(round(float(out[0]), 3), cache_stats["aot_cache_hits"])
""")


def test_editing_a_graph_pass_of_a_pack_misses_the_cache(tmp_path):
    """A hit is not planned or passed again, so the sources of every loaded pack are in its key:
    here a pack that lowers nothing changes what its graph pass does, not its version."""
    package = tmp_path / "src" / "passpack"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        textwrap.dedent("""
        import torch
        from nkipy_core import hookimpl
        from .target import TARGET

        def swap_exp(gm):
            for node in gm.graph.nodes:
                if node.target is torch.ops.aten.exp.default:
                    node.target = getattr(torch.ops.aten, TARGET).default

        @hookimpl
        def nkipy_graph_passes(stage):
            return [swap_exp] if stage == "aten" else None
    """)
    )
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "torch")}
    outputs = []
    for target in ("exp", "exp", "sin"):
        (package / "target.py").write_text(f"TARGET = {target!r}\n")
        proc = subprocess.run(
            [sys.executable, "-c", PASS_PROGRAM, str(tmp_path / "nkipy"), str(tmp_path / "src")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout.split()[-2:])
    assert outputs == [["2.718", "0"], ["2.718", "1"], ["0.841", "0"]]
