"""PyTorch's whole OpInfo database in strict mode: which of its ops compile into kernels.

``run_conformance`` judges a pack on the ops it lowers. The sweep asks a user's question instead:
for every OpInfo in the database, whoever lowers its ops, does
``torch.compile(backend="nkipy", options={"strict": True})`` of its first sample compile with
nothing left on CPU, and match eager forward and, where torch differentiates it, backward? Strict
mode turns any op left on CPU into an error, so a ``pass`` row ran entirely in kernels; a
``fail`` row's note names the op that did not (or the mismatch)::

    from nkipy_core.testing import families, run_sweep

    report = run_sweep()
    print(report.table())
    print(families(report))  # {"fft": {"pass": 3, "fail": 16, ...}, ...}

Each OpInfo runs once, at the first dtype it supports among ``PREFERRED_DTYPES`` (float32 first;
complex-only ops such as ``view_as_real`` at complex64, integer-only ones at an integer type), on
one sample with ``requires_grad`` where torch differentiates it at that dtype (outputs and
gradients compared), else as an inference graph.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import torch

from nkipy_core.testing.conformance import ConformanceReport, run_cases
from nkipy_core.testing.op_results import STATUSES, OpResult
from nkipy_core.testing.opinfo_cases import OpCase, load_op_db

__all__ = ["FAMILIES", "PREFERRED_DTYPES", "families", "family", "run_sweep", "sweep_cases"]

PREFERRED_DTYPES = (torch.float32, torch.complex64, torch.int64, torch.int32, torch.bool)

_LINALG = frozenset(
    """cholesky cholesky_inverse cholesky_solve triangular_solve lu lu_solve lu_unpack qr inverse
    det logdet svd svd_lowrank pca_lowrank pinverse matrix_exp geqrf ormqr""".split()
)
_SPECIAL = frozenset("i0 igamma igammac polygamma mvlgamma".split())
_COMPLEX = frozenset("view_as_complex view_as_real complex polar angle".split())

#: the op families the sweep counts separately, each with a test on the OpInfo's name; an OpInfo
#: in none of them is in ``"other"``
FAMILIES: dict[str, Callable[[str], bool]] = {
    "complex": lambda name: name in _COMPLEX,
    "fft": lambda name: name.startswith("fft.") or name in ("stft", "istft"),
    "linalg": lambda name: name.startswith("linalg.") or name in _LINALG,
    "special": lambda name: name.startswith("special.") or name in _SPECIAL,
}


def family(name: str) -> str:
    """The family of an OpInfo (``"linalg"`` for ``linalg.svd``, ``"special"`` for the variant
    ``polygamma.polygamma_n_1``), ``"other"`` if none."""
    names = (name, name.split(".")[0])
    return next((f for f, test in FAMILIES.items() if any(map(test, names))), "other")


def sweep_cases(
    *, include: Collection[str] | None = None, exclude: Collection[str] = ()
) -> list[OpCase]:
    """A case per OpInfo of the database (``name.variant``), without targets: every op of its
    graphs is held to strict mode. ``include``/``exclude`` filter by case or OpInfo name."""
    cases = []
    for opinfo in load_op_db():
        names = {opinfo.full_name, opinfo.name}
        if (include is None or names & set(include)) and not names & set(exclude):
            cases.append(OpCase(opinfo.full_name, (), opinfo))
    return sorted(cases, key=lambda c: c.name)


def _dtype(opinfo: Any) -> torch.dtype | None:
    supported = opinfo.supported_dtypes("cpu")
    return next((d for d in PREFERRED_DTYPES if d in supported), None) or min(
        supported, key=str, default=None
    )


def run_sweep(
    *,
    include: Collection[str] | None = None,
    exclude: Collection[str] = (),
    backward: bool = True,
    op_budget: float | None = 30.0,
    budget: float | None = None,
    cache_dir: str | Path | None = None,
    options: dict[str, Any] | None = None,
    progress: Callable[[OpResult], None] | None = None,
) -> ConformanceReport:
    """Every OpInfo (or those ``include`` names) compiled strictly on its first sample and
    compared with eager; ``options`` are added to ``{"strict": True}`` (e.g. a runtime)."""
    runs = []
    for case in sweep_cases(include=include, exclude=exclude):
        dtype = _dtype(case.opinfo)
        if dtype is not None:
            runs.append((case, dtype))
    return run_cases(
        runs,
        max_samples=1,
        backward=backward,
        backward_samples=1,
        inference_for_backward_samples=False,
        search_samples=0,
        op_budget=op_budget,
        budget=budget,
        cache_dir=cache_dir,
        options={"strict": True, **(options or {})},
        progress=progress,
    )


def families(report: ConformanceReport) -> dict[str, dict[str, int]]:
    """Rows per family and status: ``{"fft": {"pass": 3, "fallback": 0, "fail": 16, ...}}``."""
    counts = {f: dict.fromkeys(STATUSES, 0) for f in (*FAMILIES, "other")}
    for row in report.rows:
        counts[family(row.op)][row.status] += 1
    return counts
