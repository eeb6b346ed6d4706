"""PyTorch's OpInfo database through every lowering of nkipy-ops-base, against eager.

Whatever rules the pack registers are picked up (``run_conformance("nkipy-ops-base")``); each
OpInfo that reaches one of them is compiled on its first two float32 samples, the first one
with ``requires_grad`` (forward and backward compared), the second as an inference graph. The
run is bounded (about a minute on two cores; a hard stop at ``RUN_BUDGET`` seconds turns the
remaining rows into ``skip``). See the table with ``pytest -s``.
"""

import pytest
import torch

pytest.importorskip("nkipy_ops_base")

from nkipy_core.testing import assert_conformance, run_conformance  # noqa: E402

RUN_BUDGET = 150.0  # seconds for the whole run
OP_BUDGET = 20.0  # seconds per OpInfo

#: OpInfo name -> why it fails; only real bugs in nkipy-ops-base rules, each to be fixed there.
#: An entry whose row stops failing makes the test fail, so that it gets removed.
KNOWN_FAILURES: dict[str, str] = {}


def test_ops_base_matches_eager_on_opinfo_samples():
    report = run_conformance(
        "nkipy-ops-base",
        dtypes=(torch.float32,),
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
        print(f"lowered but not verified by any passing OpInfo ({len(unverified)}): {', '.join(unverified)}")
    assert report.summary()["pass"] > 0
    assert_conformance(report, known_failures=KNOWN_FAILURES)
