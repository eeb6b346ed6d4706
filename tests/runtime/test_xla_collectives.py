"""torch.distributed with the ``xla`` runtime, in two real processes (torchrun).

One process's XLA client has no peers, so a kernel cannot hold a collective on ``xla``: compiled
functions keep their collectives outside kernels (run through the ``nkipy`` process group, with a
fallback warning that says why) and still equal eager torch on every rank. The ``wait_tensor`` of
such a collective stays outside too, or a kernel would read the tensor before the collective
wrote it.
"""

from __future__ import annotations

import compiled_collectives_worker
import pytest
from compiled_collectives_worker import CASES
from torchrun import rank_results


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("xla_collectives")
    return rank_results(compiled_collectives_worker.__file__, "xla", str(out), *CASES, out=out)


@pytest.mark.parametrize("case", sorted(CASES))
def test_collectives_stay_outside_xla_kernels_and_match_eager(results, case):
    for rank, by_case in enumerate(results):
        outcome = by_case[case]
        assert isinstance(outcome, dict), f"rank {rank}:\n{outcome}"
        assert outcome["kernels"] >= 1, f"rank {rank}: the rest of the graph is not a kernel"
        declined = [
            w
            for w in outcome["fallbacks"]
            if "the xla runtime runs no collectives inside kernels" in w
        ]
        assert declined, (
            f"rank {rank}: no warning says why the collective left the kernel: {outcome['fallbacks']}"
        )
