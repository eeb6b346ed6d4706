"""Conformance harness: PyTorch's OpInfo database through ``torch.compile(backend="nkipy")``.

For every ATen op a pack lowers, the OpInfos whose op maps to it are run on a few of their
sample inputs, compiled with the nkipy backend and compared with eager, forward and (for
differentiable ops) backward. Any pack can run it on its own ops::

    from nkipy_core.testing import assert_conformance, run_conformance

    def test_my_pack_conforms():
        report = run_conformance("my-nkipy-pack", max_samples=2)
        print(report.table())
        assert_conformance(report)

or one test per op::

    from nkipy_core.testing import check_case, conformance_cases

    @pytest.mark.parametrize("case", conformance_cases("my-nkipy-pack"), ids=str)
    def test_op(case):
        check_case(case, max_samples=2)

Each row is one OpInfo (``name.variant``) at one dtype, with the lowered overloads it targets:

- ``pass``: every sample matched eager, and at least one compiled graph contained a target
  overload that the pack lowered (the op was really exercised, not just run on CPU);
- ``fallback``: the results matched, but a ``FallbackWarning`` named an overload of the op
  (no rule, or the rule declined with ``Unsupported``) - the note says which and why;
- ``fail``: a mismatch against eager, an exception, or a rule (of any op in the graphs) that
  *raised* while being tried (the core turns that into a fallback; here it is a bug) - the
  note holds the first error;
- ``skip``: nothing to compare (no OpInfo covers the op, the OpInfo does not support the
  dtype, a random op without a deterministic sample, no sample reaches a target overload, or
  the time budget ran out) - the note says which.

Samples: values of ``empty``-like ops are not compared (only shapes and dtypes). Random ops
(``nondeterministic_seeded``) draw other numbers than eager (Philox in the kernels), so their
values are compared only on samples that turn randomness off (``p=0``/``dropout_p=0``); their
other samples are compared by shape and dtype, forward and backward, and a passing row says how
many samples were (their distributions are tested statistically in the pack's own tests).
What the compiled graphs contained is observed through a ``nkipy_graph_passes`` hook
registered for the duration of the run; fallbacks are read from the ``FallbackWarning``s.

OpInfos are matched to lowered ops by name: the OpInfo's ``name``, ``aten_name`` and alias
names (and their last component for ``nn.functional.*``/``special.*``) against the ATen packet
name and its normalised forms (``_softmax`` -> ``softmax``, ``native_layer_norm`` ->
``layer_norm``, ``add_`` -> ``add``, ``gelu_backward`` -> ``gelu`` with backward forced on), plus
``EXTRA_OPINFOS`` for ops whose OpInfo has another name (``convolution`` -> ``nn.functional.conv2d``).
Every variant (``div.trunc_rounding``...) is its own row.

Importing ``torch.testing._internal.common_methods_invocations`` needs the ``expecttest``
package (the ``nkipy-core[testing]`` extra). Importing it also calls ``torch.backends.disable_global_flags()``, as PyTorch's own tests do.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from nkipy_core.testing.expected_failures import ExpectedFailures
from nkipy_core.testing.observation import kernel_cache
from nkipy_core.testing.op_results import STATUSES, TOLERANCES, OpResult, run_case
from nkipy_core.testing.opinfo_cases import (
    EXTRA_OPINFOS,
    OpCase,
    conformance_cases,
    load_op_db,
    lowered_ops,
)

__all__ = [
    "EXTRA_OPINFOS",
    "STATUSES",
    "TOLERANCES",
    "ConformanceReport",
    "OpCase",
    "OpResult",
    "assert_conformance",
    "check_case",
    "conformance_cases",
    "load_op_db",
    "lowered_ops",
    "run_case",
    "run_cases",
    "run_conformance",
]


def _shorten(text: str, width: int | None) -> str:
    return text if width is None or len(text) <= width else text[: width - 3] + "..."


@attrs.frozen
class ConformanceReport:
    """Rows of a conformance run; ``table()`` renders them, ``summary()`` counts them."""

    rows: tuple[OpResult, ...]
    lowered_ops: tuple[str, ...] = ()
    seconds: float = 0.0

    def by_status(self, status: str) -> list[OpResult]:
        return [r for r in self.rows if r.status == status]

    def failures(self) -> list[OpResult]:
        return self.by_status("fail")

    def summary(self) -> dict[str, int]:
        """``{"pass": n, "fallback": n, "fail": n, "skip": n}``."""
        return {status: len(self.by_status(status)) for status in STATUSES}

    def verified_ops(self) -> list[str]:
        """Lowered overloads that some passing row exercised through a kernel."""
        return sorted({op for r in self.rows if r.status == "pass" for op in r.lowered})

    def unverified_ops(self) -> list[str]:
        return sorted(set(self.lowered_ops) - set(self.verified_ops()))

    def summary_line(self) -> str:
        counts = ", ".join(f"{n} {s}" for s, n in self.summary().items())
        verified = (
            f"; {len(self.verified_ops())}/{len(self.lowered_ops)} lowered overloads verified"
            if self.lowered_ops
            else ""
        )
        return f"{len(self.rows)} rows: {counts}{verified} ({self.seconds:.1f}s)"

    def table(
        self, note_width: int | None = 100, op_width: int | None = 42, summary: bool = True
    ) -> str:
        """A fixed-width text table: op, dtype, status, samples, fwd, bwd, note, then the summary.

        ``samples`` is how many OpInfo samples ran; ``fwd`` compiled runs whose outputs matched /
        were compared; ``bwd`` the same for gradients (``-``: not checked). Longer ops and notes
        are shortened to ``op_width``/``note_width`` (``None``: never).
        """
        header = ("op", "dtype", "status", "samples", "fwd", "bwd", "note")
        lines = []
        for r in self.rows:
            lines.append(
                (
                    _shorten(r.op, op_width),
                    r.dtype,
                    r.status,
                    str(r.samples),
                    r.fwd,
                    r.bwd,
                    _shorten(r.note, note_width),
                )
            )
        widths = [
            max(len(h), *(len(line[i]) for line in lines)) if lines else len(h)
            for i, h in enumerate(header)
        ]
        widths[-1] = 0

        def fmt(cells: Sequence[str]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

        out = [fmt(header), fmt(["-" * w if w else "----" for w in widths])]
        out.extend(fmt(line) for line in lines)
        if summary:
            out.append(self.summary_line())
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()


def run_conformance(
    target: str | Iterable[Any],
    *,
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    max_samples: int = 3,
    backward: bool | Collection[str] = True,
    backward_samples: int = 1,
    inference_for_backward_samples: bool = True,
    search_samples: int = 4,
    include: Collection[str] | None = None,
    exclude: Collection[str] = (),
    op_budget: float | None = 60.0,
    budget: float | None = None,
    tolerances: dict[torch.dtype, tuple[float, float]] | None = None,
    cache_dir: str | Path | None = None,
    options: dict[str, Any] | None = None,
    seed: int = 0,
    progress: Callable[[OpResult], None] | None = None,
) -> ConformanceReport:
    """Run every case of ``target`` (a distribution name or ATen overloads) at every dtype.

    The sampling options are ``run_case``'s.

    ``backward`` is ``True``/``False`` or a collection of case/OpInfo names to run backward
    for (cases whose targets only occur in backward graphs always run it). ``op_budget`` is the
    time budget per row and ``budget`` the whole run's: once spent, remaining rows are ``skip``.
    One kernel cache (``cache_dir``, default a temporary directory) serves the whole run; dynamo
    is reset between samples and cases, and warnings other than nkipy's are silenced.
    ``progress`` is called with each row as it completes.
    """
    cases = conformance_cases(target, include=include, exclude=exclude)
    ops = sorted({op for case in cases for op in case.targets})
    return run_cases(
        [(case, dtype) for case in cases for dtype in dtypes],
        lowered=ops,
        max_samples=max_samples,
        backward=backward,
        backward_samples=backward_samples,
        inference_for_backward_samples=inference_for_backward_samples,
        search_samples=search_samples,
        op_budget=op_budget,
        budget=budget,
        tolerances=tolerances,
        cache_dir=cache_dir,
        options=options,
        seed=seed,
        progress=progress,
    )


def run_cases(
    runs: Sequence[tuple[OpCase, torch.dtype]],
    *,
    lowered: Sequence[str] = (),
    op_budget: float | None = 60.0,
    budget: float | None = None,
    cache_dir: str | Path | None = None,
    progress: Callable[[OpResult], None] | None = None,
    **sampling: Any,
) -> ConformanceReport:
    """Run each ``(case, dtype)`` with ``run_case`` in one kernel cache, within the budgets;
    rows the run's ``budget`` no longer reaches are ``skip``. ``sampling`` is ``run_case``'s."""
    start = time.monotonic()
    rows: list[OpResult] = []
    with kernel_cache(cache_dir) as cache:
        for case, dtype in runs:
            if budget is not None and time.monotonic() - start > budget:
                row = OpResult(
                    case.name,
                    str(dtype).removeprefix("torch."),
                    "skip",
                    case.targets,
                    note="time budget of the run exhausted",
                )
            else:
                remaining = (
                    None if budget is None else max(0.0, budget - (time.monotonic() - start))
                )
                per_op = op_budget if remaining is None else min(op_budget or math.inf, remaining)
                row = run_case(case, dtype=dtype, cache_dir=cache, time_budget=per_op, **sampling)
            rows.append(row)
            if progress is not None:
                progress(row)
    return ConformanceReport(tuple(rows), tuple(lowered), time.monotonic() - start)


def assert_conformance(
    report: ConformanceReport | OpResult,
    *,
    allow_fallback: bool = True,
    allow_skip: bool = True,
    expected_failures: ExpectedFailures | None = None,
) -> None:
    """Raise ``AssertionError`` listing the rows that are not acceptable.

    ``fail`` rows always are, unless every failing sample of the row is listed in
    ``expected_failures`` (usually ``ExpectedFailures.read`` of a checked-in file, see
    ``expected_failures.py``); a listed sample that ran and passed, or whose row the run no longer
    has, is reported too, so that the file says what fails today.
    ``fallback`` and ``skip`` rows are acceptable unless ``allow_fallback``/``allow_skip`` is false.
    """
    __tracebackhide__ = True
    if isinstance(report, OpResult):
        report = ConformanceReport((report,))
    expected = expected_failures or ExpectedFailures()
    bad = [
        row
        for row in report.rows
        if (
            row.status == "fail"
            and any((row.op, row.dtype, s) not in expected.reasons for s, _ in row.failed_samples)
        )
        or (row.status == "fallback" and not allow_fallback)
        or (row.status == "skip" and not allow_skip)
    ]
    lines = []
    if bad:
        lines.append(f"{len(bad)} conformance row(s) not acceptable:")
        lines.append(
            ConformanceReport(tuple(bad)).table(note_width=None, op_width=None, summary=False)
        )
    lines.extend(expected.compare(report).lines())
    if lines:
        raise AssertionError("\n".join(lines))


def check_case(
    case: OpCase, *, allow_fallback: bool = True, allow_skip: bool = True, **kwargs: Any
) -> OpResult:
    """``run_case`` then ``assert_conformance`` on its row (for a test per case)."""
    row = run_case(case, **kwargs)
    assert_conformance(row, allow_fallback=allow_fallback, allow_skip=allow_skip)
    return row
