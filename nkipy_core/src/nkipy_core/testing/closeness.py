"""Comparing a compiled result with eager torch when eager itself is the less exact of the two.

torch's CPU kernels for half floats do not round the same way on every machine: a bf16
convolution on a CPU without AVX-512 rounds partial sums to bf16 (here its error against float64
was 3x that of computing in float32 and rounding once, which nkipy's kernels do). A compiled
result that differs from such an eager result is still right if, element by element, it is no
farther from the exact value (the op in float64) than eager is, plus the usual tolerance. Where
the values are not half floats, or no exact value is given, this is ``torch.testing.assert_close``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from nkipy_core import _torch

HALF = (torch.bfloat16, torch.float16)


def upcast(value: Any) -> Any:
    """``value`` with every half-float tensor made float64 (for the exact run of an op)."""
    return _torch.tree_map(
        lambda t: t.detach().double() if isinstance(t, torch.Tensor) and t.dtype in HALF else t,
        value,
    )


def assert_close_to_eager(
    actual: Any, expected: Any, *, rtol: float, atol: float, exact: Callable[[], Any] | None = None
) -> None:
    """``assert_close(actual, expected)``, or, for half floats, no farther than eager from ``exact()``.

    ``exact`` computes the op in float64 (usually on ``upcast`` inputs); it is called only when the
    plain comparison fails and a half-float tensor is involved.
    """
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
        return
    except AssertionError:
        pairs = list(zip(_torch.tree_leaves(actual), _torch.tree_leaves(expected)))
        if exact is None or not any(
            isinstance(e, torch.Tensor) and e.dtype in HALF for _, e in pairs
        ):
            raise
    for (a, e), x in zip(pairs, _torch.tree_leaves(exact()), strict=True):
        if not (isinstance(e, torch.Tensor) and e.dtype in HALF and isinstance(a, torch.Tensor)):
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
            continue
        assert (a.shape, a.dtype) == (e.shape, e.dtype), (
            f"{a.shape}/{a.dtype} != {e.shape}/{e.dtype}"
        )
        a64, e64, x64 = a.detach().double(), e.detach().double(), x.detach().double()
        bound = (e64 - x64).abs() + atol + rtol * x64.abs()
        ok = ((a64 - x64).abs() <= bound) | (a64.isnan() & e64.isnan()) | (a64 == e64)
        if not bool(ok.all()):
            worst = int(((a64 - x64).abs() - bound).nan_to_num(float("inf")).argmax())
            raise AssertionError(
                f"{int((~ok).sum())} of {ok.numel()} element(s) differ from eager and are farther from the "
                f"float64 result than eager: at flat index {worst}, compiled {a64.flatten()[worst].item()}, "
                f"eager {e64.flatten()[worst].item()}, float64 {x64.flatten()[worst].item()}"
            )
