"""Python floats as inputs of eager single-op kernels: the kernel cache key is the op, shapes and
dtypes, not every value a scalar argument takes.

Optimizers call ops such as ``addcdiv_(p, m, v, value=-step_size)`` with a new float at every
step; baking each value into its kernel would compile a kernel per step. So the op is lowered
twice, with its floats replaced by two different sentinel values, and every 0-d ``constant``
holding a sentinel becomes a conversion of a new f64 kernel parameter (one per float, in
argument order). If both lowerings then give the same kernel, the rule used the floats only as
those constants and the kernel holds for every value. Otherwise (the rule did arithmetic on a
float, derived a shape from it, or branched on it differently) ``NotLiftable`` is raised and the
caller keys kernels by the float values instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir.graph import Kernel, Op, Value
from ..ir.printer import format_kernel
from ..ir.types import DType, TensorType

#: more floats than this in one call are not lifted (sentinels must stay distinct and exact)
MAX_FLOATS = 8


class NotLiftable(Exception):  # noqa: N818 - control flow, like ``Unsupported``
    """The floats of this call cannot become kernel inputs."""


def sentinel(index: int, variant: int) -> float:
    """Exactly representable in f16, bf16, f32 and f64, and unlike any constant a rule writes."""
    return (1 + (2 * index + variant + 1) / 128) * 2.0**-7


def substitute(value, floats: list[float], variant: int):
    """``value`` with its Python floats replaced by sentinels, visited in ``eager._signature``
    order; ``floats`` collects the replaced values."""
    if type(value) is float:
        floats.append(value)
        return sentinel(len(floats) - 1, variant)
    if isinstance(value, (list, tuple)):
        return type(value)(substitute(v, floats, variant) for v in value)
    if isinstance(value, dict):
        return {k: substitute(v, floats, variant) for k, v in value.items()}
    return value


def lift(kernel: Kernel, count: int, variant: int) -> Kernel:
    """``kernel`` with each constant equal to a sentinel read from a new f64 parameter."""
    next_id = 1 + max([v.id for v in kernel.params] + [op.result.id for op in kernel.ops], default=-1)
    params = [Value(next_id + i, TensorType((), DType.f64)) for i in range(count)]
    ops = []
    for op in kernel.ops:
        index = _sentinel_index(op, count, variant)
        if index is not None:
            op = Op("convert", (params[index],), {"dtype": op.result.type.dtype}, op.result, op.origin)
        ops.append(op)
    return Kernel(kernel.name, [*kernel.params, *params], ops, kernel.outputs)


def _sentinel_index(op: Op, count: int, variant: int) -> int | None:
    if op.prim != "constant" or op.result.type.shape != () or not op.result.type.dtype.is_float:
        return None
    value = op.params["value"].array
    for index in range(count):
        if value == np.asarray(sentinel(index, variant)).astype(value.dtype):
            return index
    return None


def same(kernels: Sequence[Kernel]) -> bool:
    texts = {format_kernel(k, with_origin=False) for k in kernels}
    return len(texts) == 1
