"""Ranks sharing one kernel cache: each kernel is compiled once, nothing is corrupted, and a
dead lock holder blocks nobody. Every rank is a real process; the runtime is the cpu runtime
with a compiler made as slow as a real one, which records each compile in a shared file."""

import collections
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).parent

# argv: cache, compile record, barrier directory, ranks meeting at the barrier, compile seconds
RANK_PROGRAM = textwrap.dedent("""
    import hashlib, json, os, sys, time, types, torch
    sys.path.insert(0, {here!r})
    from fixture_packs import arithmetic_rules, pack
    from nkipy_core import cache_stats, hookimpl, kernel_boundary, plugins
    from nkipy_core.ir import codegen
    from nkipy_core.runtime.cpu import CpuRuntime

    cache, record, barrier, ranks, compile_seconds = sys.argv[1:6]

    class SlowCompiler(CpuRuntime):
        name = "slow-cpu"

        def compile(self, kernel, options):
            code = hashlib.sha256(codegen.generate(kernel).encode()).hexdigest()
            with open(record, "a") as f:  # one short O_APPEND write: lines never interleave
                f.write(f"{{os.getpid()}} {{code}}\\n")
            time.sleep(float(compile_seconds))
            return super().compile(kernel, options)

    @hookimpl
    def nkipy_register_runtimes(registry):
        registry.register(SlowCompiler())

    plugins.register(pack(arithmetic_rules(priority=1000)), "arith", "arith-pack", "1.0")
    plugins.register(types.SimpleNamespace(nkipy_register_runtimes=nkipy_register_runtimes), "slow", "slow-rt", "1.0")
    plugins.reload()

    def f(a):  # two kernels
        return torch.exp(kernel_boundary(torch.exp(a) * a)) + a

    x = torch.linspace(-2, 2, 24).reshape(4, 6)
    open(os.path.join(barrier, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(barrier)) < int(ranks) and time.monotonic() < deadline:
        time.sleep(0.01)
    out = torch.compile(f, backend="nkipy", options={{"nkipy_cache": cache, "runtime": "slow-cpu"}})(x)
    print(json.dumps({{"ok": torch.allclose(out, f(x)), **cache_stats}}))
""").format(here=str(HERE))


def start_rank(
    tmp: Path, barrier: str, ranks: int, compile_seconds: float, **env: str
) -> subprocess.Popen:
    (tmp / barrier).mkdir(exist_ok=True)
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            RANK_PROGRAM,
            str(tmp / "cache"),
            str(tmp / "compiles"),
            str(tmp / barrier),
            str(ranks),
            str(compile_seconds),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


#: seconds a rank may take: four ranks importing torch at once on a loaded 2-core machine take
#: up to a minute before they reach the race itself
RANK_TIMEOUT = 240


def finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=RANK_TIMEOUT)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def compiles(tmp: Path) -> list[tuple[int, str]]:
    """(pid, kernel code digest) of every compile any rank started, in order."""
    lines = (tmp / "compiles").read_text().splitlines() if (tmp / "compiles").exists() else []
    return [(int(pid), code) for pid, code in (line.split() for line in lines)]


def wait_until(condition, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def holds_open_lock_file(proc: subprocess.Popen, cache: Path) -> bool:
    """Whether the process has a compile lock file open, i.e. waits for or holds a lock."""
    targets = []
    for fd in Path(f"/proc/{proc.pid}/fd").iterdir():
        try:
            targets.append(os.readlink(fd))
        except FileNotFoundError:  # closed since listed
            continue
    return any(target.startswith(str(cache / "locks")) for target in targets)


def assert_cache_intact(cache: Path) -> None:
    entries = list((cache / "kernels").iterdir())
    assert entries
    for entry in entries:
        meta = json.loads((entry / "meta.json").read_text())
        for name, expected in meta["files"].items():
            assert hashlib.sha256((entry / name).read_bytes()).hexdigest() == expected, (
                f"{entry}/{name}"
            )
    assert not list((cache / "tmp").iterdir())  # no staging or discarded entry left behind


def test_four_ranks_racing_compile_each_kernel_once(tmp_path):
    ranks = [start_rank(tmp_path, "barrier", 4, compile_seconds=1.5) for _ in range(4)]
    results = [finish(r) for r in ranks]
    assert all(r["ok"] for r in results)
    assert all(r.get("corrupt", 0) == 0 for r in results)
    per_kernel = collections.Counter(code for _, code in compiles(tmp_path))
    assert set(per_kernel.values()) == {1}, per_kernel  # every kernel compiled exactly once
    assert len(per_kernel) == len(list((tmp_path / "cache" / "kernels").iterdir())) > 1
    assert sum(r.get("compiled_kernels", 0) for r in results) == len(per_kernel)
    assert sum(r.get("waited_for_other_process", 0) for r in results) >= 1  # the race did happen
    assert_cache_intact(tmp_path / "cache")


def test_a_lock_holder_blocks_others_only_while_it_lives(tmp_path):
    """While it lives, a waiter past the lock timeout gets a typed error; once it is killed
    (mid-compile), the OS releases its lock and a waiting rank compiles the kernel."""
    holder = start_rank(tmp_path, "holder", 1, compile_seconds=120)
    try:
        wait_until(lambda: compiles(tmp_path), "the first rank to start compiling")
        impatient = start_rank(
            tmp_path, "impatient", 1, compile_seconds=0, NKIPY_CACHE_LOCK_TIMEOUT="0.5"
        )
        patient = start_rank(tmp_path, "patient", 1, compile_seconds=0)
        _, err = impatient.communicate(timeout=60)
        wait_until(
            lambda: holds_open_lock_file(patient, tmp_path / "cache"),
            "the patient rank to reach the lock",
        )
        time.sleep(0.3)
        assert patient.poll() is None  # blocked behind the holder's lock
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert impatient.returncode != 0
    assert "CacheLockTimeoutError: waited 0.5 s for another process to compile kernel" in err
    assert "setting NKIPY_CACHE_LOCK_TIMEOUT (seconds)" in err
    result = finish(patient)
    assert result["ok"] and result.get("waited_for_other_process", 0) == 0
    (killed_pid, killed_kernel), *_ = compiles(tmp_path)
    assert killed_pid == holder.pid
    assert (patient.pid, killed_kernel) in compiles(
        tmp_path
    )  # the patient rank compiled it after the kill
    assert_cache_intact(tmp_path / "cache")
