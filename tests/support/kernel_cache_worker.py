"""The processes of the kernel cache's crash-safety tests (``tests/ops_base/test_cache_crash.py``).

``python kernel_cache_worker.py <directory> <steps as JSON>`` imports torch and nkipy once, warms
dynamo up on a graph of its own (another cache), then runs each step in a forked child and prints
one JSON line per step. A forked child has done the slow imports but compiled nothing and knows
nothing of the cache, as a new process would; that is what lets a test afford dozens of real
processes killed by real signals on a busy machine.

A ``run`` step compiles some of ``FUNCTIONS`` for inputs of one size and compares each result
with eager torch. It may be constrained (``fsize``: ``RLIMIT_FSIZE`` in bytes; ``no_dac``: the
child loses ``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH``, so permission bits bind it even as
root) or killed with ``SIGKILL``: ``kill_after`` a fraction of the last ``calibrate`` step's run
time (sent by this process), or ``kill_at_op``, a fraction of the number of file system writes
into the cache that ``calibrate`` counted (the child kills itself, just before that write, from an
audit hook). A ``scan`` step checks the cache as a reader would find it; ``chmod`` (clear mode
bits, recursively or not) and ``age_tmp`` (make what is in ``tmp/`` look an hour old) change it
between runs. Each step works on the cache named by its ``cache`` (default ``cache``) in the
directory.
"""

import ctypes
import hashlib
import json
import math
import os
import resource
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from nkipy_core import CacheWarning, cache_stats, kernel_boundary


def exp_times(a):
    return torch.exp(a) * a + 1


def two_kernels(a):
    return torch.tanh(kernel_boundary(a * 3.0 - 1)) * a


def sigmoid_minus_abs(a):
    return torch.sigmoid(a) - torch.abs(a)


FUNCTIONS = {f.__name__: f for f in (exp_times, two_kernels, sigmoid_minus_abs)}
KERNELS = {"exp_times": 1, "two_kernels": 2, "sigmoid_minus_abs": 1}

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT
_PATH_EVENTS = ("os.mkdir", "os.rename", "os.remove", "os.rmdir")
_LAYOUT = {"kernels", "index", "locks", "tmp"}


def _is_cache_write(event: str, args: tuple, root: str) -> str | None:
    """The cache-relative path an audit event writes, if it is a write into the cache."""
    if event == "open":
        path, mode, flags = args
        writing = any(c in mode for c in "wax+") if mode else bool(flags & _WRITE_FLAGS)
    elif event in _PATH_EVENTS:
        path, writing = args[0], True
    else:
        return None
    if not writing or not isinstance(path, (str, os.PathLike)):
        return None
    path = os.fspath(path)
    if not path.startswith(root + os.sep):
        return None
    where = os.path.relpath(path, root)
    if where in _LAYOUT or os.path.basename(where).startswith(".probe-"):
        return None  # every open of the cache makes its layout and probes it: no entry yet
    return where


def _count_cache_writes(root: str, kill_at: int | None, report) -> list[int]:
    """Count the child's writes into the cache; SIGKILL itself just before write ``kill_at``."""
    count = [0]

    def hook(event, args):
        where = _is_cache_write(event, args, root)
        if where is None:
            return
        count[0] += 1
        if count[0] == kill_at:
            report({"killed_before": f"{event} {where}"})
            os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)
    return count


def _drop_dac_capabilities() -> None:
    """Make permission bits bind this process even as root (no-op for other users)."""
    libc = ctypes.CDLL(None, use_errno=True)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    for bit in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        data[0].effective &= ~(1 << bit)
        data[0].permitted &= ~(1 << bit)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _workload(cache: str, size: int, names: list[str], report) -> dict:
    x = torch.linspace(-2, 2, 4 * size).reshape(4, size)
    report({"started": True})
    results = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in names:
            fn = FUNCTIONS[name]
            try:
                out = torch.compile(fn, backend="nkipy", options={"nkipy_cache": cache})(x)
                torch.testing.assert_close(out, fn(x))
                results[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - reported to the test, which asserts on it
                results[name] = f"{type(exc).__name__}: {exc}"
            report({"compiled": name})
    return {
        "results": results,
        "stats": dict(cache_stats),
        "cache_warnings": [str(w.message) for w in caught if w.category is CacheWarning],
    }


def _child(cache: str, step: dict, counted: dict, out: int) -> None:
    def report(record: dict) -> None:
        os.write(out, (json.dumps(record) + "\n").encode())

    if step.get("no_dac"):
        _drop_dac_capabilities()
    kill_at = None
    if "kill_at_op" in step:
        kill_at = max(1, math.ceil(step["kill_at_op"] * counted["ops"]))
    writes = _count_cache_writes(cache, kill_at, report)
    if "fsize" in step:
        resource.setrlimit(resource.RLIMIT_FSIZE, (step["fsize"], step["fsize"]))
    result = _workload(cache, step["size"], step.get("functions", list(FUNCTIONS)), report)
    report({**result, "ops": writes[0], "done": True})


def run(cache: str, step: dict, counted: dict) -> dict:
    """Fork a child for a ``run`` step; its reports merged, whether SIGKILL ended it, its time."""
    read, write = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            _child(cache, step, counted, write)
        finally:
            os._exit(0)
    os.close(write)
    if "kill_after" in step:
        time.sleep(step["kill_after"] * counted["seconds"])
        os.kill(pid, signal.SIGKILL)
    with os.fdopen(read) as lines:
        reports = [json.loads(line) for line in lines]
    _, status = os.waitpid(pid, 0)
    merged = {k: v for r in reports for k, v in r.items()}
    merged["killed"] = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    merged["seconds"] = time.monotonic() - start
    return merged


def scan(cache: str) -> dict:
    """What a reader finds: entries failing their checksums, index files that are not JSON or
    name no intact entry, and what is left in ``tmp/``."""
    root = Path(cache)
    bad_entries, intact = [], set()
    for entry in sorted((root / "kernels").iterdir()):
        try:
            meta = json.loads((entry / "meta.json").read_text())
            for name, digest in meta["files"].items():
                assert hashlib.sha256((entry / name).read_bytes()).hexdigest() == digest, name
            intact.add(entry.name)
        except Exception as exc:  # noqa: BLE001 - any failure is what the test reports
            bad_entries.append(f"{entry.name}: {type(exc).__name__}: {exc}")
    bad_index, dangling = [], 0
    for index in sorted((root / "index").iterdir()):
        try:
            value = json.loads(index.read_text())
        except ValueError as exc:
            bad_index.append(f"{index.name}: {exc}")
            continue
        dangling += "kernel" in value and value["kernel"] not in intact
    return {
        "files": sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()),
        "entries": len(intact),
        "bad_entries": bad_entries,
        "bad_index": bad_index,
        "dangling_index": dangling,
        "tmp": sorted(p.name for p in (root / "tmp").iterdir()),
    }


def chmod(cache: str, clear: int, recursive: bool) -> dict:
    paths = [Path(cache)]
    if recursive:
        paths += [p for p in Path(cache).rglob("*") if not p.is_symlink()]
    for path in reversed(paths):  # children first: a directory may lose its x bit last
        path.chmod(path.stat().st_mode & ~clear)
    return {"changed": len(paths)}


def age_tmp(cache: str, seconds: float) -> dict:
    then = time.time() - seconds
    aged = [p for p in (Path(cache) / "tmp").rglob("*")]
    for path in aged:
        os.utime(path, (then, then), follow_symlinks=False)
    return {"aged": sorted(str(p.relative_to(Path(cache) / "tmp")) for p in aged)}


def stage(cache: str, name: str) -> dict:
    """What a live writer has in ``tmp/`` while it writes an entry: a young staging directory."""
    (Path(cache) / "tmp" / name).mkdir()
    (Path(cache) / "tmp" / name / "kernel.py").write_text("# being written\n")
    return {}


def main() -> None:
    base, steps = Path(sys.argv[1]).resolve(), json.loads(sys.argv[2])
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as warm:  # dynamo's lazy imports, not our functions
        torch.compile(lambda a: torch.cos(a) + 2, backend="nkipy", options={"nkipy_cache": warm})(
            torch.ones(2, 2)
        )
    torch._dynamo.reset()
    cache_stats.clear()
    counted = {"ops": 0, "seconds": 0.0}
    for step in steps:
        cache = str(base / step.get("cache", "cache"))
        if step["kind"] == "scan":
            result = scan(cache)
        elif step["kind"] == "chmod":
            result = chmod(cache, step["clear"], step["recursive"])
        elif step["kind"] == "age_tmp":
            result = age_tmp(cache, step["seconds"])
        elif step["kind"] == "stage":
            result = stage(cache, step["name"])
        else:
            result = run(cache, step, counted)
            if step["kind"] == "calibrate":
                counted = {"ops": result["ops"], "seconds": result["seconds"]}
        print(json.dumps({"step": step, **result}), flush=True)


if __name__ == "__main__":
    main()
