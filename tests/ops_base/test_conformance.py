"""PyTorch's OpInfo database through every lowering of nkipy-ops-base, against eager.

Whatever rules the pack registers are picked up (``run_conformance("nkipy-ops-base")``); each
OpInfo that reaches one of them is compiled on its first two samples, the first one with
``requires_grad`` (forward and backward compared), the second as an inference graph, in each
dtype torch supports among float32, bfloat16, float16 and float64. A dtype's run takes a few
minutes on two cores; ``RUN_BUDGET`` only guards against a hang, and a run that exhausts it
fails, since the rows it did not reach would go unjudged. See the table with ``pytest -s``.

The run uses the runtime the backend selects (``NKIPY_RUNTIME=xla`` runs it on XLA). A rule
computes the same numbers on every runtime, so the ``cpu`` runtime checks all four dtypes and
the other runtimes, which differ in how the kernel is emitted, float32 and bfloat16. Samples that
fail on purpose are listed, with why, in ``conformance_expected_failures.txt`` (the ``cpu``
runtime) or ``conformance_expected_failures.<runtime>.txt``; the test fails on a failing sample
that is not listed and on a listed one that passes. After changing rules, rewrite the file from
a run and review the diff::

    NKIPY_UPDATE_EXPECTED_FAILURES=1 pytest tests/ops_base/test_conformance.py
"""

from pathlib import Path

import pytest
import torch

from nkipy_core.config import settings as config
from nkipy_core.testing import assert_conformance, expected_failures_for, run_conformance

RUN_BUDGET = 2400.0  # seconds for the whole run: several times what it takes on two idle cores
OP_BUDGET = 20.0  # seconds per OpInfo


def runtime_name() -> str:
    return config.select_runtime(config.current()).name


def expected_failures_file() -> Path:
    suffix = "" if runtime_name() == "cpu" else f".{runtime_name()}"
    return Path(__file__).with_name(f"conformance_expected_failures{suffix}.txt")


DTYPES = [torch.float32, torch.bfloat16]
if runtime_name() == "cpu":
    DTYPES += [torch.float16, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ops_base_matches_eager_on_opinfo_samples(dtype):
    report = run_conformance(
        "nkipy-ops-base",
        dtypes=(dtype,),
        max_samples=2,
        backward=True,
        backward_samples=1,
        inference_for_backward_samples=False,
        op_budget=OP_BUDGET,
        budget=RUN_BUDGET,
    )
    print()
    print(report.table(note_width=140))
    unverified = report.unverified_ops()
    if unverified:
        print(
            f"lowered but not verified by any passing OpInfo ({len(unverified)}): {', '.join(unverified)}"
        )
    assert report.summary()["pass"] > 0
    unjudged = [r.op for r in report.rows if "time budget of the run exhausted" in r.note]
    assert not unjudged, (
        f"the run exceeded RUN_BUDGET={RUN_BUDGET}s; {len(unjudged)} rows went unjudged: {unjudged}"
    )
    assert_conformance(
        report, expected_failures=expected_failures_for(report, expected_failures_file())
    )
