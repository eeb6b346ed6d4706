"""Python numbers as inputs of eager single-op kernels: the kernel cache key is the op, shapes and
dtypes, not every value a scalar argument takes.

Optimizers call ops such as ``addcdiv_(p, m, v, value=-step_size)`` with a new float at every
step, and loops call ``x.clamp(min=i)`` or ``x.fill_(i)`` with a new int; baking each value into
its kernel would compile a kernel per value. So the op is lowered three times: with its numbers
replaced by sentinels of their type (small positive ones, large negative ones) and with the real
values. In each kernel every 0-d ``constant`` holding one of that lowering's values becomes a
conversion of a new kernel parameter (f64 for a float, i64 for an int; one per number, in
argument order). If every number shows up that way and the three kernels are then identical, the
rule used the numbers only as values and the kernel holds for every value. Otherwise (the rule
cast a float to an integer, did arithmetic on it, derived a shape from it, or branched on its
sign or size) ``NotLiftable`` is raised and the caller keys kernels by the values instead.

Floats are lifted wherever they appear; ints only where the op's schema declares a ``Scalar``
(``clamp``'s bounds, ``fill``'s value), since an ``int`` argument is a dimension or a size.
Values rules commonly special-case (0, ±1, infinities, NaN) are always keyed by value.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from nkipy_core.ir.graph import Kernel, Op, Value
from nkipy_core.ir.printer import format_kernel
from nkipy_core.ir.types import DType, TensorType

#: more numbers than this in one call are not lifted (sentinels must stay distinct and exact)
MAX_FLOATS = 8
#: ints a kernel can take as an i64 input
_INT64 = range(-(2**63), 2**63)


class NotLiftable(Exception):  # noqa: N818 - control flow, like ``Unsupported``
    """The floats of this call cannot become kernel inputs."""


def liftable(value: object) -> bool:
    """A Python float that may become a kernel input (not one rules tend to special-case)."""
    return type(value) is float and math.isfinite(value) and value not in (0.0, 1.0, -1.0)


def liftable_int(value: object) -> bool:
    """A Python int, given for a ``Scalar`` argument, that may become a kernel input (not one
    rules tend to special-case, and within i64)."""
    return type(value) is int and value not in (0, 1, -1) and value in _INT64


#: how many distinct variant-0 sentinels there are of each kind: the most numbers of one kind a
#: fused eager kernel takes as inputs (``device/pending.py``)
SENTINEL_FLOATS = 64 * 8
SENTINEL_INTS = 46


def sentinel(index: int, variant: int, kind: type = float) -> float | int:
    """A stand-in for the ``index``-th number of a call, of its ``kind`` (float or int): unlike
    any constant a rule writes, exactly representable in every float dtype (bf16 and f16
    included: eight significant bits, normal f16 exponents) and, for an int, in i8. Variant 0
    is small and positive, variant 1 negative and larger. Past 64 floats the exponent moves
    (variant 0 down, variant 1 up) so that up to ``SENTINEL_FLOATS`` stay distinct."""
    if kind is int:
        return 37 + 2 * index if variant == 0 else -(69 + 2 * index)
    block, index = divmod(index, 64)
    if variant == 0:
        return (1 + (2 * index + 1) / 128) * 2.0 ** (-7 - block)
    return -(1 + (2 * index + 2) / 128) * 2.0 ** (5 + block)


def sentinels(values: Sequence[float | int], variant: int) -> list[float | int]:
    """The sentinels that stand for ``values`` (see ``sentinel``)."""
    return [sentinel(i, variant, type(v)) for i, v in enumerate(values)]


def substitute(
    args: tuple, kwargs: dict, scalar_slots: Collection[int | str], values: list, variant: int
) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with their liftable numbers replaced by sentinels, visited in
    ``eager._signature`` order; ``values`` collects the replaced numbers. Ints are replaced in
    the ``scalar_slots`` only (positions and names of the op's ``Scalar`` arguments)."""

    def one(value, slot: int | str):
        if slot in scalar_slots and liftable_int(value):
            values.append(value)
            return sentinel(len(values) - 1, variant, int)
        return _floats(value, values, variant)

    return (
        tuple(one(a, i) for i, a in enumerate(args)),
        {k: one(v, k) for k, v in kwargs.items()},
    )


def _floats(value, values: list, variant: int):
    """``value`` with its liftable floats replaced by sentinels (``substitute``)."""
    if liftable(value):
        values.append(value)
        return sentinel(len(values) - 1, variant)
    if isinstance(value, (list, tuple)):
        return type(value)(_floats(v, values, variant) for v in value)
    return value


def lift(kernel: Kernel, values: Sequence[float | int], every: bool = True) -> Kernel:
    """``kernel`` (lowered with ``values`` for the numbers) with each 0-d constant equal to one
    of them read from a new parameter (f64 for a float, i64 for an int); ``NotLiftable`` if some
    value never shows up (unless not ``every`` is required: its parameter is then unused)."""
    next_id = 1 + max(
        [v.id for v in kernel.params] + [op.result.id for op in kernel.ops], default=-1
    )
    params = [
        Value(next_id + i, TensorType((), DType.i64 if type(v) is int else DType.f64))
        for i, v in enumerate(values)
    ]
    ops, used = [], set()
    for op in kernel.ops:
        index = _value_index(op, values)
        if index is not None:
            used.add(index)
            op = Op(
                "convert", (params[index],), {"dtype": op.result.type.dtype}, op.result, op.origin
            )
        ops.append(op)
    if every and len(used) != len(values):
        raise NotLiftable("a float is not used as a value of the kernel")
    return Kernel(kernel.name, [*kernel.params, *params], ops, kernel.outputs)


def _value_index(op: Op, values: Sequence[float | int]) -> int | None:
    """Which of ``values`` a 0-d constant holds: a float only in a float constant, an int in a
    float or an integer one (``clamp(int_tensor, min=5)`` keeps the tensor's dtype)."""
    dtype = op.result.type.dtype
    if (
        op.prim != "constant"
        or op.result.type.shape != ()
        or not (dtype.is_float or dtype.is_integer)
    ):
        return None
    value = op.params["value"].array
    for index, candidate in enumerate(values):
        if (dtype.is_float or type(candidate) is int) and value == dtype.scalar(candidate):
            return index
    return None


def same(kernels: Sequence[Kernel]) -> bool:
    texts = {format_kernel(k, with_origin=False) for k in kernels}
    return len(texts) == 1
