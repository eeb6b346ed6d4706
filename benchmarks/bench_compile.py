"""Cold and warm compile time of the Llama-style block: nkipy vs inductor vs eager.

Every measurement runs in a fresh Python process (this script re-invokes itself with
``--child``), so no in-process cache helps:

  cold   empty cache directory (nkipy's kernel cache / inductor's TORCHINDUCTOR_CACHE_DIR)
  warm   a NEW process on the cache directory the cold run filled

Before timing, the child compiles and runs a tiny unrelated function with the same backend and
then calls ``torch._dynamo.reset()``, so one-time process costs (lazy imports, plugin discovery,
C++ toolchain probing) are not attributed to the block. The time reported is from
``torch.compile`` to the first output of the block (inference, ``torch.no_grad()``); for eager it
is the first forward call. nkipy's ``cache_stats`` of the warm run are printed as evidence that
the warm process did not lower anything (``lowered_kernels`` absent, i.e. 0) and that torch's
AOTAutograd cache gave it the graphs (``aot_cache_hits``: AOTAutograd did not trace) and that
nkipy rebuilt them from their stored kernel calls (``aot_cache_restored``: ``compile_graph`` did
not run), with the time spent inside nkipy's ``compile_graph`` and in restoring the entry's graphs
(``NkipyGraph.post_compile``) next to the total.

Run: python benchmarks/bench_compile.py [--repeat 1] [--sdpa]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

from _timing import machine, print_table  # first: it sets the thread count (children inherit it)

BACKENDS = ("eager", "nkipy", "inductor")


def child(backend: str, cache: str, sdpa: bool) -> dict:
    """Runs in the subprocess: prime, reset, then time compile + first call of the block."""
    import torch

    import nkipy_core
    import nkipy_core.dynamo.backend
    from nkipy_core.dynamo.aot_cache import NkipyGraph
    from nkipy_core.testing.models import LlamaBlock

    # Time spent in nkipy's own FX -> kernels driver (plan, partition, lower, cache, runtime
    # compile), as opposed to dynamo tracing and AOTAutograd (or, warm, loading its cache entry).
    # And, warm, the time nkipy spends making the callables of the graphs torch's AOTAutograd
    # cache entry holds.
    in_nkipy = [0.0, 0.0]

    def timed(function, slot):
        def timed_function(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                in_nkipy[slot] += time.perf_counter() - start

        return timed_function

    nkipy_core.dynamo.backend.compile_graph = timed(nkipy_core.dynamo.backend.compile_graph, 0)
    NkipyGraph.post_compile = timed(NkipyGraph.post_compile, 1)

    def compile_(fn):
        if backend == "eager":
            return fn
        options = {"nkipy_cache": cache} if backend == "nkipy" else None
        return torch.compile(fn, backend=backend, options=options)

    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compile_(lambda a, b: torch.add(a, b) * 2)(torch.ones(3), torch.ones(3))  # prime
        torch._dynamo.reset()
        nkipy_core.cache_stats.clear()
        torch._dynamo.utils.counters.clear()
        caught.clear()
        in_nkipy[:] = [0.0, 0.0]

        model = LlamaBlock(sdpa=sdpa).eval()
        x = model.example_input()
        start = time.perf_counter()
        out = compile_(model)(x)
        seconds = time.perf_counter() - start
        error = (out - model(x)).abs().max().item()

    fallbacks = sorted(
        {
            str(w.message).split(" runs on CPU")[0].removeprefix("nkipy: ")
            for w in caught
            if issubclass(w.category, nkipy_core.FallbackWarning)
        }
    )
    return {
        "seconds": seconds,
        "max_abs_err": error,
        "nkipy_compile_graph_seconds": in_nkipy[0],
        "nkipy_post_compile_seconds": in_nkipy[1],
        "nkipy_cache_stats": dict(nkipy_core.cache_stats),
        "inductor_counters": {
            k: v
            for group in ("inductor", "aot_autograd")
            for k, v in torch._dynamo.utils.counters[group].items()
            if "cache" in k
        },
        "fallback_ops": fallbacks,
    }


def run_child(backend: str, cache: str, sdpa: bool) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor")}
    cmd = [sys.executable, __file__, "--child", backend, cache] + (["--sdpa"] if sdpa else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
        return {"seconds": None, "error": tail[0][:120]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--repeat", type=int, default=1, help="cold/warm pairs per backend; medians are reported"
    )
    parser.add_argument(
        "--sdpa", action="store_true", help="attention via F.scaled_dot_product_attention"
    )
    parser.add_argument("--child", nargs=2, metavar=("BACKEND", "CACHE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.sdpa)))
        return

    results: dict[str, list[dict]] = {}
    for backend in BACKENDS:
        for _ in range(args.repeat):
            cache = tempfile.mkdtemp(prefix=f"nkipy-bench-compile-{backend}-")
            for kind in ("cold", "warm"):
                results.setdefault(f"{backend} {kind}", []).append(
                    run_child(backend, cache, args.sdpa)
                )

    rows, notes = [], {}
    for name, runs in results.items():
        times = [r["seconds"] for r in runs if r["seconds"] is not None]
        rows.append((name, statistics.median(times) if times else None))
        if not times:
            notes[name] = "failed: " + runs[0]["error"]
    # ratios against the same temperature: cold vs cold, warm vs warm
    print(f"machine: {machine()}")
    for kind in ("cold", "warm"):
        subset = [(n.split()[0], t) for n, t in rows if n.endswith(kind)]
        print_table(
            f"LlamaBlock{' (sdpa)' if args.sdpa else ''} fp32, {kind} cache: torch.compile + first call "
            f"(median of {args.repeat} fresh process(es))",
            subset,
            unit="s",
            note={n.split()[0]: v for n, v in notes.items() if n.endswith(kind)},
        )

    print("\nevidence (last run of each):")
    for name in ("nkipy cold", "nkipy warm"):
        run = results[name][-1]
        print(f"  {name:<14} nkipy cache_stats {run.get('nkipy_cache_stats')}")
        print(
            f"  {'':<14} {run.get('nkipy_compile_graph_seconds', 0):.3f} s of it in nkipy's compile_graph, "
            f"{run.get('nkipy_post_compile_seconds', 0):.3f} s restoring the AOTAutograd entry's graphs "
            f"(the rest: dynamo, AOTAutograd, first call); max|out - eager| {run.get('max_abs_err')}"
        )
    for name in ("inductor cold", "inductor warm"):
        run = results[name][-1]
        print(f"  {name:<14} inductor/AOTAutograd cache counters {run.get('inductor_counters')}")
    warm = results["nkipy warm"][-1]
    if warm.get("seconds") is not None:
        lowered = warm["nkipy_cache_stats"].get("lowered_kernels", 0)
        print(
            f"  nkipy warm run lowered_kernels = {lowered}"
            + ("  (the cache skipped lowering)" if lowered == 0 else "  (UNEXPECTED)")
        )
        restored = warm["nkipy_cache_stats"].get("aot_cache_hits", 0)
        print(
            f"  nkipy warm run aot_cache_hits = {restored}"
            + ("  (AOTAutograd did not trace)" if restored else "  (AOTAutograd traced again)")
        )
        rebuilt = warm["nkipy_cache_stats"].get("aot_cache_restored", 0)
        print(
            f"  nkipy warm run aot_cache_restored = {rebuilt}"
            + ("  (compile_graph did not run)" if rebuilt else "  (compile_graph ran again)")
        )
        ops = results["nkipy cold"][-1].get("fallback_ops", [])
        print(f"  nkipy: {len(ops)} ATen op(s) fell back to torch on CPU: {', '.join(ops) or '-'}")


if __name__ == "__main__":
    main()
