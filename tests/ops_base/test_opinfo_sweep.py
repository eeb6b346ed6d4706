"""Every OpInfo of PyTorch's database compiled in strict mode with the installed packs.

``run_sweep`` compiles each OpInfo's first sample with ``options={"strict": True}`` (an op left
on CPU is an error) and compares it with eager, forward and backward. What does not pass is
listed, with why, in ``opinfo_sweep_expected_failures.txt``; the test fails on a failure that is
not listed and on a listed one that passes, so the file is always today's list of what stays on
CPU. Every op strict mode names there must carry the pack's reason
(``nkipy_ops_base.stays_on_cpu``), which is what users read in fallback warnings and in
``nkipy-ops list --coverage``. Rewrite it from a run and review the diff::

    NKIPY_UPDATE_EXPECTED_FAILURES=1 pytest tests/ops_base/test_opinfo_sweep.py

The counts per family are printed with ``pytest -s``. About ten minutes on two cores.
"""

import re
from pathlib import Path

from nkipy_core.plugin import manager as plugins
from nkipy_core.testing import assert_conformance, expected_failures_for, families, run_sweep

EXPECTED = Path(__file__).with_name("opinfo_sweep_expected_failures.txt")
RUN_BUDGET = 3000.0  # seconds: about ten times what the run takes on two idle cores


def test_every_opinfo_compiles_strictly_or_is_listed_with_its_reason():
    report = run_sweep(budget=RUN_BUDGET)
    print()
    print(report.summary_line())
    for name, counts in families(report).items():
        print(f"  {name:8s} " + "  ".join(f"{status} {n}" for status, n in counts.items()))
    unjudged = [r.op for r in report.rows if "time budget of the run exhausted" in r.note]
    assert not unjudged, f"the sweep exceeded {RUN_BUDGET}s; unjudged: {unjudged}"
    assert report.summary()["pass"] > 500
    assert_conformance(report, expected_failures=expected_failures_for(report, EXPECTED))
    unexplained = sorted(
        {
            op
            for row in report.rows
            for op in re.findall(r"(?:^|; )- (aten::\S+) \(", row.note)
            if not plugins.get().lowerings.cpu_notes(op)
        }
    )
    assert not unexplained, f"ops left on CPU without the pack's reason: {unexplained}"
