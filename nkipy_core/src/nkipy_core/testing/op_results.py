"""Running one conformance case (an OpInfo at a dtype) over its samples, and classifying the
outcome as pass, fallback, fail or skip."""

from __future__ import annotations

import time
import warnings
import zlib
from collections.abc import Collection
from pathlib import Path
from typing import Any

import attrs
import torch

from nkipy_core import _torch
from nkipy_core.testing.observation import (
    kernel_cache,
    observing,
    quiet_torch_logs,
    traceable_opinfo_wrappers,
)
from nkipy_core.testing.opinfo_cases import OpCase, packet
from nkipy_core.testing.samples import SampleOutcome, fallbacks_named, one_line, run_sample

STATUSES = ("pass", "fallback", "fail", "skip")

#: (rtol, atol) for forward results; gradients use the same rtol and ten times the atol
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


@attrs.frozen
class OpResult:
    """One row of a report: a case at one dtype, how its samples went and why."""

    op: str
    dtype: str
    status: str
    targets: tuple[str, ...]
    samples: int = 0
    fwd_checked: int = 0
    fwd_ok: int = 0
    bwd_checked: int = 0
    bwd_ok: int = 0
    note: str = ""
    error: str = ""
    lowered: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()
    other_fallbacks: tuple[str, ...] = ()
    seconds: float = 0.0
    #: ids of the samples that were compared (see ``SampleOutcome.id``), and (id, why) of those that failed
    checked_samples: tuple[str, ...] = ()
    failed_samples: tuple[tuple[str, str], ...] = ()

    @property
    def backward_checked(self) -> bool:
        return self.bwd_checked > 0

    @property
    def fwd(self) -> str:
        return f"{self.fwd_ok}/{self.fwd_checked}" if self.fwd_checked else "-"

    @property
    def bwd(self) -> str:
        return f"{self.bwd_ok}/{self.bwd_checked}" if self.bwd_checked else "-"


def _tolerance(
    dtype: torch.dtype, tolerances: dict[torch.dtype, tuple[float, float]] | None
) -> tuple[float, float]:
    table = {**TOLERANCES, **(tolerances or {})}
    if dtype in table:
        return table[dtype]
    return (
        (0.0, 0.0)
        if not (dtype.is_floating_point or dtype.is_complex)
        else TOLERANCES[torch.float32]
    )


def _wants_backward(case: OpCase, backward: bool | Collection[str]) -> bool:
    if case.backward_only:
        return True
    if isinstance(backward, bool):
        return backward
    return case.name in backward or (case.opinfo is not None and case.opinfo.name in backward)


def _seed(name: str, seed: int) -> int:
    return (zlib.crc32(name.encode()) + seed) % (2**31)


#: kwargs that switch randomness off when zero: only such samples of a random op are compared
_RANDOMNESS_KWARGS = ("dropout_p", "p")


def _deterministic(sample: Any) -> bool:
    return any(sample.kwargs.get(name, None) == 0 for name in _RANDOMNESS_KWARGS)


def _samples(
    opinfo: Any, dtype: torch.dtype, requires_grad: bool, count: int, seed: int
) -> list[Any]:
    """The first ``count`` samples (among the first 64)."""
    torch.manual_seed(seed)
    out: list[Any] = []
    with warnings.catch_warnings(), _torch.opinfo_samples_untracked():
        warnings.simplefilter("ignore")
        for n, sample in enumerate(opinfo.sample_inputs("cpu", dtype, requires_grad=requires_grad)):
            if len(out) >= count or n >= 64:
                break
            out.append(sample)
    return out


def run_case(
    case: OpCase,
    *,
    dtype: torch.dtype = torch.float32,
    max_samples: int = 3,
    backward: bool | Collection[str] = True,
    backward_samples: int = 1,
    inference_for_backward_samples: bool = True,
    search_samples: int = 4,
    tolerances: dict[torch.dtype, tuple[float, float]] | None = None,
    cache_dir: str | Path | None = None,
    options: dict[str, Any] | None = None,
    time_budget: float | None = 60.0,
    seed: int = 0,
) -> OpResult:
    """Run one case at one dtype and classify it (see the module docstring).

    The first ``max_samples`` OpInfo samples are compiled as inference graphs (inputs without
    ``requires_grad``) and their outputs compared. If ``backward`` is true or names the case, the
    first ``backward_samples`` samples are also compiled with ``requires_grad`` inputs, and
    their outputs and gradients (for a seeded random cotangent) compared; with
    ``inference_for_backward_samples=False`` those samples skip the inference run (one compile
    per sample instead of two: their forward is still compared, from the training graph).
    If none of those runs reaches a target overload (e.g. ``matmul``'s first samples are
    vectors, which dispatch to ``dot``), up to ``search_samples`` further samples are tried,
    one at a time, until one does.

    In the result, ``fwd`` counts compiled runs whose outputs were compared (inference and
    training), ``bwd`` runs whose gradients were. ``time_budget`` (seconds) stops taking new
    runs once spent. ``cache_dir`` is the kernel cache (a fresh temporary directory if
    ``None``); ``options`` are extra ``torch.compile`` options for the backend (e.g.
    ``{"runtime": "xla"}``).
    """
    start = time.monotonic()
    dtype_name = str(dtype).removeprefix("torch.")
    row: dict[str, Any] = dict(op=case.name, dtype=dtype_name, targets=case.targets)

    def done(status: str, note: str, **fields: Any) -> OpResult:
        return OpResult(status=status, note=note, seconds=time.monotonic() - start, **row, **fields)

    opinfo = case.opinfo
    if opinfo is None:
        return done("skip", f"no OpInfo covers {', '.join(case.targets)}")
    if dtype not in opinfo.supported_dtypes("cpu"):
        return done("skip", f"OpInfo does not support {dtype_name}")
    random = [t for t in case.targets if _is_random(t)]
    seed = _seed(case.name, seed)
    tol = _tolerance(dtype, tolerances)
    want_bwd = (
        _wants_backward(case, backward)
        and backward_samples > 0
        and dtype in opinfo.supported_backward_dtypes("cpu")
    )
    try:
        fwd = _samples(opinfo, dtype, False, max_samples + search_samples, seed)
        extra_bwd = search_samples if case.backward_only else 0
        bwd = _samples(opinfo, dtype, True, backward_samples + extra_bwd, seed) if want_bwd else []
    except Exception as exc:  # noqa: BLE001
        return done(
            "skip", f"OpInfo samples raised {type(exc).__name__}: {one_line(str(exc), 120)}"
        )
    if not fwd and not bwd:
        return done("skip", f"OpInfo has no {dtype_name} samples")

    deadline = None if time_budget is None else start + time_budget
    results: list[SampleOutcome] = []
    runs, search = [], []
    for j in range(max(len(fwd), len(bwd))):
        if j < min(len(bwd), backward_samples):
            runs.append((j, bwd[j], True))
        elif case.backward_only and j < len(bwd):
            search.append((j, bwd[j], True))
        if j < min(len(fwd), max_samples) and (j >= len(bwd) or inference_for_backward_samples):
            runs.append((j, fwd[j], False))
        elif j >= max_samples and not case.backward_only and j < len(fwd):
            search.append((j, fwd[j], False))
    truncated = False
    with (
        kernel_cache(cache_dir) as cache,
        observing() as observer,
        traceable_opinfo_wrappers(),
        quiet_torch_logs(),
    ):
        opts = {"nkipy_cache": str(cache), **(options or {})}
        for i, (index, sample, is_bwd) in enumerate(runs + search):
            if deadline is not None and time.monotonic() > deadline and results:
                truncated = True
                break
            if i >= len(runs) and (
                observer.seen & set(case.targets) or any(r.error for r in results)
            ):
                break  # the search for a sample that reaches the op is over
            result = SampleOutcome(
                index=index, grad=is_bwd, values=not random or _deterministic(sample)
            )
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                run_sample(
                    opinfo,
                    sample,
                    backward=is_bwd,
                    tol=tol,
                    options=opts,
                    seed=seed + i,
                    result=result,
                )
            result.fallbacks = fallbacks_named(caught)
            results.append(result)
        torch.compiler.reset()
    return _classify(case, results, observer.seen, truncated, done)


def _is_random(overload: str) -> bool:
    try:
        from nkipy_core.plugin.registry import resolve_op

        return torch.Tag.nondeterministic_seeded in resolve_op(overload).tags
    except (AttributeError, ValueError):
        return False


def _classify(
    case: OpCase, results: list[SampleOutcome], seen: set[str], truncated: bool, done
) -> OpResult:
    # a case without targets (the OpInfo sweep) is about every op of its graphs
    packets = {packet(t) for t in case.targets}
    fallbacks: dict[str, str] = {}
    others: dict[str, str] = {}
    for r in results:
        for op, why in r.fallbacks.items():
            (fallbacks if not packets or packet(op) in packets else others).setdefault(op, why)
    lowered = tuple(sorted(t for t in case.targets if t in seen and t not in fallbacks))
    counts = dict(
        samples=len({r.index for r in results if not r.skipped}),
        fwd_checked=sum(r.fwd_checked for r in results),
        fwd_ok=sum(r.fwd_ok for r in results),
        bwd_checked=sum(r.bwd_checked for r in results),
        bwd_ok=sum(r.bwd_ok for r in results),
        lowered=lowered,
        fallbacks=tuple(f"{op}: {why}" for op, why in sorted(fallbacks.items())),
        other_fallbacks=tuple(sorted(others)),
        checked_samples=tuple(r.id for r in results if r.fwd_checked),
        failed_samples=tuple((r.id, r.failure()) for r in results if r.failure()),
    )
    budget = " (time budget reached)" if truncated else ""
    # mismatches and exceptions first; then rules that raised (a bug wherever they sit in the graph)
    failing = [r for r in results if r.error] + [r for r in results if not r.error and r.failure()]
    if failing:
        message = failing[0].failure()
        return done("fail", message + budget, error=message, **counts)
    if not any(r.fwd_ok or r.bwd_ok for r in results):
        skips = [r.skipped for r in results if r.skipped]
        return done(
            "skip", (skips[0] if skips else "no sample had anything to compare") + budget, **counts
        )
    if fallbacks:
        op, why = sorted(fallbacks.items())[0]
        more = f" (+{len(fallbacks) - 1} more)" if len(fallbacks) > 1 else ""
        return done("fallback", one_line(f"{op}: {why}{more}") + budget, **counts)
    if case.targets and not lowered:
        ran = sorted(seen) or ["nothing"]
        return done(
            "skip",
            one_line(
                f"samples never reach {', '.join(case.targets)} (graphs had {', '.join(ran[:6])})"
            )
            + budget,
            **counts,
        )
    notes = [f"also on CPU: {', '.join(sorted(others))}"] if others else []
    shape_only = sum(1 for r in results if not r.values and (r.fwd_ok or r.bwd_ok))
    if shape_only:
        notes.append(f"random: {shape_only} run(s) compared by shape and dtype only")
    return done("pass", one_line("; ".join(notes) + budget), **counts)
