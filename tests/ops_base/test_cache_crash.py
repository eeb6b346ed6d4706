"""The kernel cache under crashes and hostile file systems, with real processes and conditions
(here, where nkipy-ops-base makes the compiled functions real kernels):
processes killed by SIGKILL while compiling and writing, a file size limit that makes every write
fail, a directory the process may not write or read. In each case compiles give eager torch's
results, and what the cache holds afterwards is either intact or absent.

The processes are forked by ``tests/support/kernel_cache_worker.py`` (see its docstring), which
prints what each one did; the tests assert on that.
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).parents[1] / "support" / "kernel_cache_worker.py"
KERNELS = 4  # of the worker's three functions: every run needs each one, hit or compiled
KILL_RUNS = 14
SEED = 20240611


def run_worker(directory: Path, steps: list[dict]) -> dict[str, dict]:
    """The worker's report of each step, by the step's ``name`` (unnamed steps by index)."""
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(directory), json.dumps(steps)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=directory,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(directory / "torch")},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    reports = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(reports) == len(steps), proc.stderr[-4000:]
    return {r["step"].get("name", str(i)): r for i, r in enumerate(reports)}


def kill_plan() -> list[dict]:
    """Runs on inputs of a new size each (so each compiles all its kernels), killed at a seeded
    random write into the cache (even runs) or after a seeded random delay (odd runs); after each,
    a scan of the cache and a run that must not be killed, on the same size and cache."""
    rng = random.Random(SEED)
    steps: list[dict] = [{"kind": "calibrate", "size": 2, "name": "calibrate"}]
    for run in range(KILL_RUNS):
        kill = {"kill_at_op": rng.random()} if run % 2 == 0 else {"kill_after": rng.uniform(0, 1.1)}
        steps += [
            {"kind": "run", "size": 3 + run, **kill, "name": f"kill{run}"},
            {"kind": "scan", "name": f"scan{run}"},
            {"kind": "run", "size": 3 + run, "name": f"after{run}"},
        ]
    return [
        *steps,
        {"kind": "scan", "name": "before_sweep"},
        {"kind": "age_tmp", "seconds": 3600},
        {"kind": "stage", "name": "live-writer"},
        {"kind": "run", "size": 3, "name": "sweeper"},
        {"kind": "scan", "name": "after_sweep"},
    ]


def _writing_an_entry(killed_before: str) -> bool:
    """Whether a child killed itself before that write (``kill_at_op``) while an entry or index
    file of its was half staged in ``tmp/`` (rather than at a lock or before its first write)."""
    event, _, path = killed_before.partition(" ")
    return path.startswith("tmp/") or event == "os.rename"


def test_processes_killed_while_compiling_and_writing_never_leave_a_wrong_kernel(tmp_path):
    reports = run_worker(tmp_path, kill_plan())
    assert reports["calibrate"]["ops"] > 50  # the writes the kill points are drawn from
    mid_compile = mid_write = reused = repaired = 0
    leftovers: set[str] = set()
    for run in range(KILL_RUNS):
        killed, scan, after = reports[f"kill{run}"], reports[f"scan{run}"], reports[f"after{run}"]
        # what a SIGKILL leaves is whole or absent: entries pass their checksums, index files
        # are JSON naming intact entries (a reader never meets half a file) ...
        assert scan["bad_entries"] == [] and scan["bad_index"] == [], scan
        assert scan["dangling_index"] == 0, scan
        # ... and the next process gets eager's results, hitting or compiling each kernel
        assert set(after["results"].values()) == {"ok"}, after["results"]
        stats = after["stats"]
        assert stats.get("hits", 0) + stats.get("compiled_kernels", 0) == KERNELS, stats
        mid_compile += killed["killed"] and "done" not in killed
        mid_write += _writing_an_entry(killed.get("killed_before", ""))
        leftovers |= set(scan["tmp"])
        reused += stats.get("hits", 0)
        repaired += stats.get("corrupt", 0)
    assert mid_compile >= KILL_RUNS // 2, mid_compile
    assert mid_write >= 3, mid_write  # deterministic: the seed draws these write indices
    assert reused > 0  # what killed processes stored was served to the next one
    assert repaired == 0  # nothing a kill leaves is corrupt (the checksums would repair it)
    # writers' leftovers wait in tmp/ until they are old; then the next process removes them,
    # but not the young staging directory of a writer that may be alive
    assert leftovers and set(reports["before_sweep"]["tmp"]) == leftovers
    sweeper = reports["sweeper"]
    assert set(sweeper["results"].values()) == {"ok"}
    assert sweeper["stats"]["stale_staging_removed"] == len(leftovers)
    assert reports["after_sweep"]["tmp"] == ["live-writer"]
    print(
        f"\n{KILL_RUNS} runs, {mid_compile} killed mid-compile, {mid_write} mid-write, "
        f"{reused} kernels reused after a kill, {repaired} repaired, "
        f"{len(leftovers)} leftovers swept; killed before: "
        + ", ".join(reports[f"kill{r}"].get("killed_before", "-") for r in range(0, KILL_RUNS, 2))
    )


FILE_SIZE_LIMIT = 32  # bytes: less than any entry file or index file, as on a full disk


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """One worker for the full-disk and permission cases: a cache whose writes all fail (then
    the same cache without the limit), a cache frozen read-only after a first run, and a cache
    root this process may not read."""
    directory = tmp_path_factory.mktemp("hostile")
    frozen = {"kind": "chmod", "cache": "ro", "clear": 0o222, "recursive": True}
    steps = [
        {"kind": "run", "cache": "full", "size": 3, "fsize": FILE_SIZE_LIMIT, "name": "limited"},
        {"kind": "scan", "cache": "full", "name": "after_limited"},
        {"kind": "run", "cache": "full", "size": 3, "name": "unlimited"},
        {"kind": "run", "cache": "full", "size": 3, "name": "warm"},
        {"kind": "scan", "cache": "full", "name": "after_warm"},
        {"kind": "run", "cache": "ro", "size": 3, "functions": ["exp_times", "two_kernels"]},
        frozen,
        {"kind": "scan", "cache": "ro", "name": "before_read_only"},
        {"kind": "run", "cache": "ro", "size": 3, "no_dac": True, "name": "read_only"},
        {"kind": "scan", "cache": "ro", "name": "after_read_only"},
        {"kind": "run", "cache": "locked", "size": 3, "functions": ["exp_times"]},
        {"kind": "chmod", "cache": "locked", "clear": 0o777, "recursive": False},
        {
            "kind": "run",
            "cache": "locked",
            "size": 3,
            "functions": ["exp_times"],
            "no_dac": True,
            "name": "unreadable",
        },
    ]
    try:
        yield run_worker(directory, steps)
    finally:
        for path in [directory, *directory.rglob("*")]:  # let pytest delete it
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o700)


def test_full_disk_compiles_without_caching_and_warns_once(hostile):
    limited = hostile["limited"]
    assert set(limited["results"].values()) == {"ok"}, limited["results"]
    (warning,) = limited["cache_warnings"]  # one, for every failed write of the process
    assert "EFBIG: File too large" in warning and "full" in warning and "Free space" in warning
    assert limited["stats"]["store_failed"] >= KERNELS  # each entry, plan and index write
    assert limited["stats"]["compiled_kernels"] == KERNELS
    after = hostile["after_limited"]
    assert after["entries"] == 0 and after["bad_entries"] == [] and after["tmp"] == []
    assert not any(f.startswith("index/") for f in after["files"])  # nothing points anywhere
    unlimited, warm = hostile["unlimited"], hostile["warm"]
    assert set(unlimited["results"].values()) == set(warm["results"].values()) == {"ok"}
    assert unlimited["stats"]["compiled_kernels"] == KERNELS and "corrupt" not in unlimited["stats"]
    assert warm["stats"]["hits"] == KERNELS and "compiled_kernels" not in warm["stats"]
    assert hostile["after_warm"]["entries"] == KERNELS and not unlimited["cache_warnings"]


def test_read_only_cache_serves_its_kernels_with_one_warning(hostile):
    read_only = hostile["read_only"]
    assert set(read_only["results"].values()) == {"ok"}, read_only["results"]
    (warning,) = read_only["cache_warnings"]  # once for the root, however many compiles
    assert (
        "is used read-only, as this process cannot write it (EACCES: Permission" in warning
        and "/ro" in warning
    )
    stats = read_only["stats"]
    assert stats["hits"] == 3  # the kernels of the two functions compiled before the freeze
    assert stats["compiled_kernels"] == 1 and stats["read_only_skips"] >= 1
    assert "store_failed" not in stats and "corrupt" not in stats
    # nothing written: no entry, index file or compile lock for the new kernel
    assert hostile["after_read_only"]["files"] == hostile["before_read_only"]["files"]


def test_unreadable_cache_root_is_a_typed_error(hostile):
    (error,) = hostile["unreadable"]["results"].values()
    assert "CacheError: the nkipy kernel cache directory" in error
    assert "cannot be read (EACCES: Permission denied" in error
    assert "Pass a directory this process can create or read" in error
