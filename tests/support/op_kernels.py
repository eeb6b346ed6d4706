"""One-primitive kernels for emitter tests: the primitive applied to parameters, so XLA sees
the test's arrays at run time (a constant operand could be folded by XLA before the emitted
op ever runs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nkipy_core.ir import DType, Kernel, KernelBuilder, TensorType
from nkipy_core.ir.primitives import infer


def one_op(prim: str, inputs: Sequence[np.ndarray], **params: Any) -> Kernel:
    """A kernel computing ``prim(*inputs, **params)`` from parameters typed like ``inputs``."""
    kb = KernelBuilder(f"one_{prim}")
    args = [
        kb.param(TensorType(np.shape(a), DType.from_numpy(np.asarray(a).dtype))) for a in inputs
    ]
    with kb.building(f"test.{prim}"):
        out = kb.emit(prim, args, params)
    return kb.finish([out])


#: every element type of the IR
ALL_DTYPES = tuple(DType)
#: values every float sample holds, where NumPy semantics are easiest to get wrong
FLOAT_SPECIALS = (np.nan, np.inf, -np.inf, -0.0, 0.0, 0.5, -1.5, 2.5)


def sample(
    dtype: DType, shape: Sequence[int], seed: int = 0, *, low: int = -100, high: int = 100
) -> np.ndarray:
    """Test data of ``dtype``: floats with the specials first, integers in ``[low, high)``
    (clipped to the type, so unsigned types get no negatives), booleans at random."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape, dtype=np.int64))
    if dtype is DType.bool:
        return rng.random(shape) < 0.5
    if dtype.is_float:
        values = rng.standard_normal(size) * 4
        values[: len(FLOAT_SPECIALS)] = FLOAT_SPECIALS[:size]
        return values.astype(dtype.numpy).reshape(shape)
    info = np.iinfo(dtype.numpy)
    return (
        rng.integers(max(low, info.min), min(high, int(info.max) + 1), size)
        .astype(dtype.numpy)
        .reshape(shape)
    )


def accepts(prim: str, arity: int, dtype: DType) -> bool:
    """The type rule takes ``dtype``, and so does NumPy: ``bitwise_not`` is typed for floats,
    but ``np.invert`` rejects them (a gap in the core's type rule, not an emitter's)."""
    if prim == "bitwise_not" and dtype.is_float:
        return False
    try:
        infer(prim, [TensorType((), dtype)] * arity, {})
    except TypeError:
        return False
    return True
