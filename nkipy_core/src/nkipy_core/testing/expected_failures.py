"""The expected failures of a conformance run: a checked-in text file that cannot rot.

One line per failing sample, four space-separated columns, the last one free text::

    # comment lines start with '#'; the comment block at the top is kept when the file is rewritten
    sort      bfloat16  1       equal keys: our sort is stable, torch's is not; tie indices differ
    topk      bfloat16  0:grad  same, for topk's indices

``op`` is the report row (``div.trunc_rounding``), ``dtype`` its dtype, ``sample`` the OpInfo
sample index, with ``:grad`` when the sample ran with ``requires_grad`` (outputs and gradients
compared), and then the reason.

``assert_conformance(report, expected_failures=...)`` fails on a failing sample the file does not
list and on a listed sample that ran and passed, or whose row the run no longer has; samples
that did not run (a time budget ran out) are not judged. Rather than editing the file by hand,
rewrite it from a run: ``expected_failures_for(report, path)`` does that when the environment
variable ``NKIPY_UPDATE_EXPECTED_FAILURES`` is set (lines that still fail keep their reason, new
ones get the error as a reason to edit, fixed ones go).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from nkipy_core.config import env

if TYPE_CHECKING:
    from nkipy_core.testing.conformance import ConformanceReport

UPDATE_ENV = env.NKIPY_UPDATE_EXPECTED_FAILURES.name

Key = tuple[str, str, str]  # (op, dtype, sample)


def _reasons(reasons: Mapping[Key, str]) -> dict[Key, str]:
    return dict(reasons)


@attrs.frozen
class Verdict:
    """How a run compares with the expected failures (each entry is ``"op dtype sample: why"``)."""

    unexpected_failures: tuple[str, ...] = ()
    unexpected_passes: tuple[str, ...] = ()
    not_run: tuple[Key, ...] = ()

    def lines(self) -> list[str]:
        out = []
        if self.unexpected_failures:
            out.append(
                f"{len(self.unexpected_failures)} failing sample(s) not in the expected failures:"
            )
            out.extend(f"  {line}" for line in self.unexpected_failures)
        if self.unexpected_passes:
            out.append(
                f"{len(self.unexpected_passes)} expected failure(s) that no longer fail (remove the lines):"
            )
            out.extend(f"  {line}" for line in self.unexpected_passes)
        if out:
            out.append(
                f"Fix the failures, or rewrite the file from this run with {UPDATE_ENV}=1 and review the diff."
            )
        return out


@attrs.frozen
class ExpectedFailures:
    """``(op, dtype, sample) -> reason``, plus the file's header comment."""

    reasons: dict[Key, str] = attrs.field(factory=dict, converter=_reasons)
    header: str = ""

    @classmethod
    def parse(cls, text: str, source: str = "<expected failures>") -> ExpectedFailures:
        reasons: dict[Key, str] = {}
        header: list[str] = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                if not reasons and line:
                    header.append(line)
                continue
            fields = line.split(None, 3)
            if len(fields) < 4:
                raise ValueError(
                    f"{source}:{number}: expected '<op> <dtype> <sample> <reason>', got {raw!r}"
                )
            op, dtype, sample, reason = fields
            if (op, dtype, sample) in reasons:
                raise ValueError(f"{source}:{number}: {op} {dtype} {sample} is listed twice")
            reasons[op, dtype, sample] = reason
        return cls(reasons, "\n".join(header))

    @classmethod
    def read(cls, path: str | os.PathLike) -> ExpectedFailures:
        """The file at ``path``; no file is no expected failure."""
        path = Path(path)
        return cls.parse(path.read_text(), str(path)) if path.exists() else cls()

    def format(self) -> str:
        keys = sorted(self.reasons)
        widths = [max((len(k[i]) for k in keys), default=0) for i in range(3)]
        lines = [self.header] if self.header else []
        lines.extend(
            "  ".join(part.ljust(width) for part, width in zip(key, widths))
            + "  "
            + self.reasons[key]
            for key in keys
        )
        return "\n".join(lines) + "\n"

    def write(self, path: str | os.PathLike) -> None:
        Path(path).write_text(self.format())

    def compare(self, report: ConformanceReport) -> Verdict:
        """Judge the run's rows at the dtypes it ran; entries of other dtypes are not looked at."""
        rows = {(r.op, r.dtype): r for r in report.rows}
        dtypes = {r.dtype for r in report.rows}
        unexpected_failures = [
            f"{row.op} {row.dtype} {sample}: {why}"
            for row in report.rows
            for sample, why in row.failed_samples
            if (row.op, row.dtype, sample) not in self.reasons
        ]
        unexpected_passes, not_run = [], []
        for key in sorted(k for k in self.reasons if k[1] in dtypes):
            op, dtype, sample = key
            row = rows.get((op, dtype))
            if row is None:
                unexpected_passes.append(
                    f"{op} {dtype} {sample}: the run has no row {op} [{dtype}]"
                )
            elif sample in dict(row.failed_samples):
                continue
            elif sample in row.checked_samples:
                unexpected_passes.append(
                    f"{op} {dtype} {sample}: passes now (listed as: {self.reasons[key]})"
                )
            else:
                not_run.append(key)
        return Verdict(tuple(unexpected_failures), tuple(unexpected_passes), tuple(not_run))

    def updated(self, report: ConformanceReport) -> ExpectedFailures:
        """These expected failures rewritten from ``report``: lines of samples that failed keep their
        reason (new ones get the error), lines of samples that passed or whose row is gone are
        dropped, lines the run did not judge (other dtypes, samples not run) stay."""
        verdict = self.compare(report)
        dtypes = {r.dtype for r in report.rows}
        reasons = {
            k: why for k, why in self.reasons.items() if k[1] not in dtypes or k in verdict.not_run
        }
        for row in report.rows:
            for sample, why in row.failed_samples:
                reasons[row.op, row.dtype, sample] = self.reasons.get(
                    (row.op, row.dtype, sample), why
                )
        return ExpectedFailures(reasons, self.header)


def expected_failures_for(report: ConformanceReport, path: str | os.PathLike) -> ExpectedFailures:
    """The expected failures in ``path``; when ``NKIPY_UPDATE_EXPECTED_FAILURES`` is set, first
    rewritten from ``report`` (so that the assertion that follows passes and ``git diff`` shows
    what changed)."""
    expected = ExpectedFailures.read(path)
    if env.NKIPY_UPDATE_EXPECTED_FAILURES.get():
        expected = expected.updated(report)
        expected.write(path)
    return expected
