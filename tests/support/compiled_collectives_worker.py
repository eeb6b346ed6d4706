"""One rank (started by torchrun): functions that call torch.distributed collectives, compiled
with nkipy on the named runtime, against the same functions run eagerly. On ``cpu`` the
collectives are lowered into the kernel and run through the process group
(``tests/collectives/test_compiled_collectives.py``); on ``xla`` they stay outside kernels
(``tests/runtime/test_xla_collectives.py``).

Writes ``<out>/rank<N>.json``: per case the kernel and fallback counts of the compiled graph,
or the failure.

usage: compiled_collectives_worker.py RUNTIME OUT_DIR CASE...
"""

from __future__ import annotations

import json
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import nkipy_core
from nkipy_core import init_nkipy_backend


def all_reduce_sum(x):
    h = torch.relu(x) * 2
    dist.all_reduce(h)
    return h + 1


def all_reduce_max(x):
    h = x.exp()
    dist.all_reduce(h, op=dist.ReduceOp.MAX)
    return h


def all_reduce_avg(x):
    h = x * 3
    dist.all_reduce(h, op=dist.ReduceOp.AVG)
    return h


def all_gather(x):
    out = torch.empty((x.shape[0] * dist.get_world_size(), *x.shape[1:]))
    dist.all_gather_into_tensor(out, x.sin())
    return out.cos()


def reduce_scatter(x):
    out = torch.empty((x.shape[0] // dist.get_world_size(), *x.shape[1:]))
    dist.reduce_scatter_tensor(out, x + 1)
    return out


def all_to_all(x):
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x * 2)
    return out


def broadcast(x):
    """``dist.broadcast`` is a graph break for dynamo; the functional collective is traceable."""
    return funcol.broadcast(x + 5, 1, dist.group.WORLD)


CASES = {
    f.__name__: f
    for f in (
        all_reduce_sum,
        all_reduce_max,
        all_reduce_avg,
        all_gather,
        reduce_scatter,
        all_to_all,
        broadcast,
    )
}


def main() -> None:
    runtime, out_dir, names = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    dist.init_process_group("nkipy")
    init_nkipy_backend(
        runtime=runtime, nkipy_cache=tempfile.mkdtemp(prefix=f"nkipy-rank{dist.get_rank()}-")
    )
    results: dict[str, object] = {}
    for name in names:
        torch.manual_seed(dist.get_rank())
        x = torch.randn(4, 6)
        try:
            expected = funcol.wait_tensor(CASES[name](x.clone()))
            before = nkipy_core.cache_stats["lowered_kernels"]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = torch.compile(CASES[name], backend="nkipy", fullgraph=True, dynamic=False)(
                    x.clone()
                )
            torch.testing.assert_close(got, expected)
            fallbacks = [
                str(w.message) for w in caught if issubclass(w.category, nkipy_core.FallbackWarning)
            ]
            results[name] = {
                "kernels": nkipy_core.cache_stats["lowered_kernels"] - before,
                "fallbacks": fallbacks,
            }
        except Exception:  # noqa: BLE001 - reported to the test
            results[name] = traceback.format_exc()
        torch._dynamo.reset()
    (out_dir / f"rank{dist.get_rank()}.json").write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
