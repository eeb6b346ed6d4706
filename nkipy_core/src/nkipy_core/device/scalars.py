"""Python floats as inputs of eager single-op kernels: the kernel cache key is the op, shapes and
dtypes, not every value a scalar argument takes.

Optimizers call ops such as ``addcdiv_(p, m, v, value=-step_size)`` with a new float at every
step; baking each value into its kernel would compile a kernel per step. So the op is lowered
three times: with its floats replaced by small positive sentinels, by large negative ones, and
with the real values. In each kernel every 0-d float ``constant`` holding one of that lowering's
values becomes a conversion of a new f64 kernel parameter (one per float, in argument order).
If every float shows up that way and the three kernels are then identical, the rule used the
floats only as values and the kernel holds for every value. Otherwise (the rule cast a float to
an integer, did arithmetic on it, derived a shape from it, or branched on its sign or size)
``NotLiftable`` is raised and the caller keys kernels by the float values instead. Values rules
commonly special-case (0, ±1, infinities, NaN) are always keyed by value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from nkipy_core.ir.graph import Kernel, Op, Value
from nkipy_core.ir.printer import format_kernel
from nkipy_core.ir.types import DType, TensorType

#: more floats than this in one call are not lifted (sentinels must stay distinct and exact)
MAX_FLOATS = 8


class NotLiftable(Exception):  # noqa: N818 - control flow, like ``Unsupported``
    """The floats of this call cannot become kernel inputs."""


def liftable(value: object) -> bool:
    """A Python float that may become a kernel input (not one rules tend to special-case)."""
    return type(value) is float and math.isfinite(value) and value not in (0.0, 1.0, -1.0)


def sentinel(index: int, variant: int) -> float:
    """Exactly representable in f16, bf16, f32 and f64, and unlike any constant a rule writes:
    variant 0 is small and positive, variant 1 large and negative."""
    if variant == 0:
        return (1 + (2 * index + 1) / 128) * 2.0**-7
    return -(1 + (2 * index + 2) / 128) * 2.0**5


def substitute(value, floats: list[float], variant: int):
    """``value`` with its liftable floats replaced by sentinels, visited in ``eager._signature``
    order; ``floats`` collects the replaced values."""
    if liftable(value):
        floats.append(value)
        return sentinel(len(floats) - 1, variant)
    if isinstance(value, (list, tuple)):
        return type(value)(substitute(v, floats, variant) for v in value)
    if isinstance(value, dict):
        return {k: substitute(v, floats, variant) for k, v in value.items()}
    return value


def lift(kernel: Kernel, values: Sequence[float]) -> Kernel:
    """``kernel`` (lowered with ``values`` for the floats) with each 0-d float constant equal to
    one of them read from a new f64 parameter; ``NotLiftable`` if some value never shows up."""
    next_id = 1 + max(
        [v.id for v in kernel.params] + [op.result.id for op in kernel.ops], default=-1
    )
    params = [Value(next_id + i, TensorType((), DType.f64)) for i in range(len(values))]
    ops, used = [], set()
    for op in kernel.ops:
        index = _value_index(op, values)
        if index is not None:
            used.add(index)
            op = Op(
                "convert", (params[index],), {"dtype": op.result.type.dtype}, op.result, op.origin
            )
        ops.append(op)
    if len(used) != len(values):
        raise NotLiftable("a float is not used as a value of the kernel")
    return Kernel(kernel.name, [*kernel.params, *params], ops, kernel.outputs)


def _value_index(op: Op, values: Sequence[float]) -> int | None:
    if op.prim != "constant" or op.result.type.shape != () or not op.result.type.dtype.is_float:
        return None
    value = op.params["value"].array
    for index, candidate in enumerate(values):
        if value == op.result.type.dtype.scalar(candidate):
            return index
    return None


def same(kernels: Sequence[Kernel]) -> bool:
    texts = {format_kernel(k, with_origin=False) for k in kernels}
    return len(texts) == 1
