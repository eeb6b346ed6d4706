"""pytest plugin (entry point ``pytest11``): OpInfo conformance of a pack's ops in one line.

Installed with nkipy-core, so any pack's test suite can run PyTorch's OpInfo samples through
every op the pack registers, compiled with nkipy against eager, forward and backward, in float32
and bfloat16, judged against an expected-failures file kept in the pack. Either on the command
line::

    pytest --nkipy-conformance=my-nkipy-pack

(or ``nkipy_conformance = my-nkipy-pack`` under ``[tool.pytest.ini_options]``), which adds one
test per dtype, ``nkipy-conformance[my-nkipy-pack-float32]``; or from a test, with the fixture::

    def test_conformance(nkipy_conformance):
        nkipy_conformance("my-nkipy-pack")

The expected failures are read from ``conformance_expected_failures.txt`` (beside the test file
for the fixture; in the rootdir's ``tests/`` folder, or ``--nkipy-expected-failures``, for the
option). A missing file means no failure is expected; ``NKIPY_UPDATE_EXPECTED_FAILURES=1``
rewrites it from the run (see ``nkipy_core.testing.expected_failures``).

pytest imports this module in every run where nkipy-core is installed, so it imports neither
torch nor the harness until a conformance test actually runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

EXPECTED_FAILURES = "conformance_expected_failures.txt"
DTYPES = ("float32", "bfloat16")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nkipy", "nkipy op-pack conformance")
    group.addoption(
        "--nkipy-conformance",
        action="append",
        default=[],
        metavar="PACK",
        help="add OpInfo conformance tests of every op the distribution PACK lowers (repeatable)",
    )
    group.addoption(
        "--nkipy-expected-failures",
        default=None,
        metavar="PATH",
        help=f"expected-failures file for --nkipy-conformance (default: tests/{EXPECTED_FAILURES} under the rootdir)",
    )
    group.addoption(
        "--nkipy-conformance-samples",
        type=int,
        default=2,
        metavar="N",
        help="OpInfo samples per op and dtype (default 2; the first also runs backward)",
    )
    parser.addini(
        "nkipy_conformance", "distributions whose ops get OpInfo conformance tests", type="linelist"
    )


def run_pack_conformance(pack: str, dtype_name: str, expected: Path, samples: int) -> str:
    """Run ``pack``'s conformance at one dtype and judge it against ``expected``; the report's
    table, to print. Raises ``AssertionError`` naming every unexpected outcome."""
    import torch

    from nkipy_core.testing.conformance import assert_conformance, run_conformance
    from nkipy_core.testing.expected_failures import expected_failures_for

    report = run_conformance(
        pack,
        dtypes=(getattr(torch, dtype_name),),
        max_samples=samples,
        backward=True,
        backward_samples=1,
        inference_for_backward_samples=False,
    )
    if not report.rows:
        raise AssertionError(
            f"{pack} lowers no op that an OpInfo tests: is the distribution installed (or its plugin registered), "
            "and does it register lowerings?"
        )
    assert_conformance(report, expected_failures=expected_failures_for(report, expected))
    return report.table()


class ConformanceItem(pytest.Item):
    """One pack at one dtype, added by ``--nkipy-conformance``."""

    def __init__(self, *, pack: str, dtype_name: str, expected: Path, samples: int, **kwargs):
        super().__init__(**kwargs)
        self.pack, self.dtype_name, self.expected, self.samples = (
            pack,
            dtype_name,
            expected,
            samples,
        )

    def runtest(self) -> None:
        table = run_pack_conformance(self.pack, self.dtype_name, self.expected, self.samples)
        self.add_report_section("call", "conformance", table)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, AssertionError):
            return f"{self.pack} ({self.dtype_name}) does not conform:\n{excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.expected, None, f"nkipy-conformance[{self.pack}-{self.dtype_name}]"


def _packs(config: pytest.Config) -> list[str]:
    return list(
        dict.fromkeys([*config.getoption("nkipy_conformance"), *config.getini("nkipy_conformance")])
    )


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    packs = _packs(config)
    if not packs:
        return
    option = config.getoption("nkipy_expected_failures")
    expected = Path(option) if option else config.rootpath / "tests" / EXPECTED_FAILURES
    samples = config.getoption("nkipy_conformance_samples")
    for pack in packs:
        for dtype_name in DTYPES:
            items.append(
                ConformanceItem.from_parent(
                    session,
                    name=f"nkipy-conformance[{pack}-{dtype_name}]",
                    pack=pack,
                    dtype_name=dtype_name,
                    expected=expected,
                    samples=samples,
                )
            )


@pytest.fixture
def nkipy_conformance(request: pytest.FixtureRequest):
    """``nkipy_conformance(pack, dtypes=("float32", "bfloat16"), samples=2)``: run and judge the
    pack's conformance, with ``conformance_expected_failures.txt`` beside the test file."""
    expected = Path(request.node.path).with_name(EXPECTED_FAILURES)

    def check(pack: str, dtypes: tuple[str, ...] = DTYPES, samples: int = 2) -> None:
        for dtype_name in dtypes:
            print(
                run_pack_conformance(pack, dtype_name, expected, samples)
            )  # shown with -s or on failure

    return check
