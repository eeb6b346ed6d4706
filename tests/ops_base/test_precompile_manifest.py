"""Precompile from a manifest: a run records every kernel it needs, a build machine compiles
the manifest without running the program, and the program then compiles nothing; a kernel
the manifest lacks is counted and warned about once."""

import collections
import json
import os
import subprocess
import sys
import textwrap

# A program with two functions, one of them called with two sizes (two size sets).
PROGRAM = textwrap.dedent("""
    import json, sys, warnings, torch
    from nkipy_core import cache_stats
    f = torch.compile(lambda x: torch.tanh(x) * 2 + x, backend="nkipy")
    g = torch.compile(lambda x: torch.softmax(x, -1), backend="nkipy")
    sizes = [int(s) for s in sys.argv[1].split(",")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in sizes:
            x = torch.linspace(-2, 2, 4 * n).reshape(4, n)
            torch.testing.assert_close(f(x), torch.tanh(x) * 2 + x)
            torch.testing.assert_close(g(x), torch.softmax(x, -1))
    print(json.dumps({"warnings": [f"{w.category.__name__}: {w.message}" for w in caught], **cache_stats}))
""")


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NKIPY_")}
    return {**env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), **extra}


def _cli(tmp_path, *args, **extra):
    proc = subprocess.run(
        [sys.executable, "-m", "nkipy_core.cli.main", *args],
        env=_env(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _program(tmp_path, sizes, **extra):
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, sizes],
        env=_env(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return collections.Counter(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_record_then_compile_from_the_manifest_then_run_without_compiling(tmp_path):
    manifest = tmp_path / "manifest.json"
    out = _cli(
        tmp_path,
        "precompile",
        "--record",
        str(manifest),
        "--cache",
        str(tmp_path / "recording"),
        "--",
        sys.executable,
        "-c",
        PROGRAM,
        "8,16",
    )
    document = json.loads(manifest.read_text())
    recorded = len(document["kernels"])
    assert recorded >= 4  # two functions at two sizes (a size set may need more than one kernel)
    assert f"Recorded {recorded} kernels into {manifest}" in out

    build = tmp_path / "build-cache"
    out = _cli(
        tmp_path, "precompile", "--from", str(manifest), "--runtime", "cpu", "--cache", str(build)
    )
    report = json.loads(
        _cli(
            tmp_path,
            "precompile",
            "--from",
            str(manifest),
            "--runtime",
            "cpu",
            "--cache",
            str(build),
            "--format",
            "json",
        )
    )
    assert report["cached"] == recorded and report["compiled"] == 0  # all there from the first
    assert f"Precompile for cpu into {build}" in out
    assert len(list((build / "kernels").iterdir())) == recorded

    # the fleet host: the program compiles nothing, and nothing is unlisted
    stats = _program(tmp_path, "8,16", NKIPY_CACHE=str(build), NKIPY_MANIFEST=str(manifest))
    assert stats["compiled_kernels"] == 0 and stats["unlisted_kernels"] == 0

    # a size the recording did not see: compiled, counted, warned once
    stats = _program(tmp_path, "8,12", NKIPY_CACHE=str(build), NKIPY_MANIFEST=str(manifest))
    assert stats["compiled_kernels"] >= 2 and stats["unlisted_kernels"] == stats["compiled_kernels"]
    warned = [w for w in stats["warnings"] if w.startswith("ManifestWarning")]
    assert len(warned) == 1 and "does not list it" in warned[0]


def test_a_manifest_is_data_code_in_it_is_refused(tmp_path):
    manifest = tmp_path / "manifest.json"
    _cli(
        tmp_path, "precompile", "--record", str(manifest), "--", sys.executable, "-c", PROGRAM, "8"
    )
    document = json.loads(manifest.read_text())
    marker = tmp_path / "PWNED"
    document["kernels"][0]["ir"] = (
        f"import os; open({str(marker)!r}, 'w')\n" + document["kernels"][0]["ir"]
    )
    manifest.write_text(json.dumps(document))
    proc = subprocess.run(
        [sys.executable, "-m", "nkipy_core.cli.main", "precompile", "--from", str(manifest)]
        + ["--runtime", "cpu", "--cache", str(tmp_path / "c")],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2 and "IRParseError" not in proc.stderr  # a one-line error
    assert "line 1" in proc.stderr and not marker.exists()


def test_from_takes_no_command_and_record_needs_one(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "nkipy_core.cli.main", "precompile", "--record", "m.json"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "give the command to record after --" in proc.stderr
