"""How torch computes an op, so that rules round where torch's kernels round.

torch's CPU kernels compute half floats (f16, bf16) in f32 and round the result once; their
Python-scalar operands keep full precision instead of being rounded to the tensor's dtype. A
rule that composes several primitives (``gelu``, ``addmm``, softmax, norms) or combines a half
tensor with a scalar therefore computes through ``opmath``, which mirrors torch's ``opmath_type``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nkipy_core import knp
from nkipy_core.ir import DType


def compute_dtype(dtype: DType) -> DType:
    """The dtype torch's kernels compute ``dtype`` results in: f32 for half floats."""
    return DType.f32 if dtype.is_half else dtype


def is_array(x: Any) -> bool:
    return knp.is_traced(x) or isinstance(x, np.ndarray)


def upcast(x: Any, dtype: DType) -> Any:
    """Array ``x`` as torch's kernel sees it for a ``dtype`` result: cast to ``dtype`` (the
    common dtype), then widened to the compute dtype. Scalars and ``None`` pass unchanged."""
    if not is_array(x):
        return x
    return knp.astype(knp.astype(x, dtype), compute_dtype(dtype))


def opmath(dtype: DType, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` computed as torch computes an op whose result type is ``dtype``."""
    return knp.astype(fn(*(upcast(a, dtype) for a in args)), dtype)
