"""How torch computes an op, so that rules round where torch's kernels round.

torch's CPU kernels compute half floats (f16, bf16) in f32 (``opmath_type``) and round the
result once. How a Python number (or a 0-d tensor, which TensorIterator treats the same way)
enters that computation is not one rule but two, read from ATen's CPU kernels and checked
against eager torch 2.13 value by value (``tests/ops_base/test_rules.py``, the scalar cases):

1. **Rounded to the result dtype first** (the default, ``upcast``). TensorIterator casts every
   operand to the common dtype before the kernel reads it, so ``x + 0.1`` on f16 adds
   f16(0.1) = 0.0999755859375 in f32, and ``pow.Scalar(1.1, e)`` raises f16(1.1) = 1.099609375.
   The same holds for ``sub``, ``pow``, ``remainder``, ``fmod``, ``where``, comparisons and
   fills, and for ``alpha`` of ``add``/``sub`` (``Scalar.to<scalar_t>()``). torch builds a half
   float from an f32, so a double is rounded to f32 and then to the half float
   (``DType.scalar``, and the ``convert`` primitive).
2. **Kept at f32** (``unrounded``). ``mul`` and ``div`` (true, trunc and floor) read their
   *second* operand, when it is a number or 0-d tensor, as
   ``iter.original_scalar_value<opmath_t>(2)``: ``x * 0.1`` multiplies by f32(0.1); their first
   operand is rounded as in rule 1. (Only the scalar path is in f32: divided by a tensor, trunc
   and floor division of half floats run in the half type, rounding the quotient first.) Parameters a kernel takes as ``opmath_t`` are kept too:
   ``addmm``'s ``alpha``/``beta``, the slope of ``leaky_relu``, ``elu``'s ``alpha``/``scale``/
   ``input_scale``, the ``eps`` of the norms; rules pass those to ``knp`` as Python numbers,
   which become f32 constants. (For ``clamp``/``hardtanh`` bounds the two rules agree.)

One place where torch itself is not one function of the values: ``add``/``sub`` with
``alpha != 1`` on half floats compute ``x + alpha·y`` with one rounding in the vectorised loop,
but its scalar loop rounds ``alpha·y`` to the dtype first. The scalar loop runs the tail of each
contiguous run (its last ``n mod 16`` or ``n mod 32`` elements, by the CPU's vector width) and
every element when the operands' layouts differ (one of them transposed, say). Rules follow
the vectorised loop; there, results may differ from torch by one ulp (a third of the elements
when the layouts differ).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from nkipy_core import knp
from nkipy_core.ir import DType


def compute_dtype(dtype: DType) -> DType:
    """The dtype torch's kernels compute ``dtype`` results in: f32 for half floats."""
    return DType.f32 if dtype.is_half else dtype


def is_array(x: Any) -> bool:
    return knp.is_traced(x) or isinstance(x, np.ndarray)


def is_scalar(x: Any) -> bool:
    """A Python number or a 0-d array: what TensorIterator treats as a CPU scalar."""
    return isinstance(x, (bool, int, float)) or (is_array(x) and x.shape == ())


def upcast(x: Any, dtype: DType) -> Any:
    """``x`` as torch's kernel sees it for a ``dtype`` result: cast to ``dtype`` (the common
    dtype; a Python number too), then widened to the compute dtype. ``None`` passes unchanged.

    A number becomes a ``dtype`` constant of the kernel (``knp.full``) before it is widened, so
    the rounding stays in the kernel, where the eager device can turn the constant into an
    input."""
    if x is None:
        return None
    if not is_array(x):
        x = knp.full((), x, dtype)
    return knp.astype(knp.astype(x, dtype), compute_dtype(dtype))


def unrounded(x: Any, dtype: DType) -> Any:
    """A scalar operand read at the compute dtype from its own value (rule 2 above); any other
    operand as ``upcast`` gives it."""
    if not is_scalar(x):
        return upcast(x, dtype)
    return knp.astype(x, compute_dtype(dtype))


def opmath(
    dtype: DType, fn: Callable[..., Any], *args: Any, unrounded_at: Collection[int] = ()
) -> Any:
    """``fn(*args)`` computed as torch computes an op whose result type is ``dtype``; the
    operands at positions ``unrounded_at`` keep their precision when they are scalars."""
    operands = (
        unrounded(a, dtype) if i in unrounded_at else upcast(a, dtype) for i, a in enumerate(args)
    )
    return knp.astype(fn(*operands), dtype)
