"""Elementwise math and reductions over tiles.

Every op computes in fp32 (as the engines do), takes an optional ``dtype=`` for its result
(default: the promoted dtype of its tile inputs, so bf16 stays bf16) and an optional ``mask=``
(outside it the result is unspecified on hardware; here it is 0). Integer and boolean tiles
are computed in fp32 too, which is exact below 2**24.
"""

from __future__ import annotations

import numpy as np
import torch

from nkipy_ops_nki.errors import NKIError
from nkipy_ops_nki.interpreter.indexing import mask_values
from nkipy_ops_nki.interpreter.location import kernel_error
from nkipy_ops_nki.interpreter.tiles import Tensor, apply, sbuf, values


def _erf(x: np.ndarray) -> np.ndarray:
    return torch.special.erf(torch.from_numpy(np.ascontiguousarray(x))).numpy()


def _op(fn, name: str):
    def op(*operands, dtype=None, mask=None):
        return apply(fn, *operands, dtype=dtype, mask=mask)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"``nl.{name}``: elementwise, in fp32, cast to ``dtype``."
    return op


_SQRT_2_OVER_PI = np.float32(np.sqrt(2 / np.pi))

add = _op(np.add, "add")
subtract = _op(np.subtract, "subtract")
multiply = _op(np.multiply, "multiply")
divide = _op(np.divide, "divide")
maximum = _op(np.maximum, "maximum")
minimum = _op(np.minimum, "minimum")
power = _op(np.power, "power")
equal = _op(np.equal, "equal")
not_equal = _op(np.not_equal, "not_equal")
greater = _op(np.greater, "greater")
greater_equal = _op(np.greater_equal, "greater_equal")
less = _op(np.less, "less")
less_equal = _op(np.less_equal, "less_equal")
logical_and = _op(np.logical_and, "logical_and")
logical_or = _op(np.logical_or, "logical_or")
logical_not = _op(np.logical_not, "logical_not")
exp = _op(np.exp, "exp")
log = _op(np.log, "log")
sqrt = _op(np.sqrt, "sqrt")
rsqrt = _op(lambda x: 1 / np.sqrt(x), "rsqrt")
reciprocal = _op(np.reciprocal, "reciprocal")
abs = _op(np.abs, "abs")  # noqa: A001 - the NKI name
negative = _op(np.negative, "negative")
square = _op(np.square, "square")
tanh = _op(np.tanh, "tanh")
sigmoid = _op(lambda x: 1 / (1 + np.exp(-x)), "sigmoid")
relu = _op(lambda x: np.maximum(x, 0), "relu")
gelu = _op(lambda x: 0.5 * x * (1 + _erf(x / np.float32(np.sqrt(2)))), "gelu")  # exact (erf) form
gelu_apprx_tanh = _op(
    lambda x: 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3))), "gelu_apprx_tanh"
)
silu = _op(lambda x: x / (1 + np.exp(-x)), "silu")
softplus = _op(lambda x: np.logaddexp(x, 0), "softplus")
sin = _op(np.sin, "sin")
cos = _op(np.cos, "cos")
erf = _op(_erf, "erf")
sign = _op(np.sign, "sign")
floor = _op(np.floor, "floor")
ceil = _op(np.ceil, "ceil")
where = _op(lambda c, x, y: np.where(c != 0, x, y), "where")
select = where
copy = _op(lambda x: x, "copy")


def _reduction(fn, name: str):
    def reduce(x, axis, dtype=None, keepdims=False, mask=None):
        array = values(x).astype(np.float32)
        axes = tuple(a % array.ndim for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
        if 0 in axes:
            raise kernel_error(
                NKIError,
                f"nl.{name} over axis 0, the partition dimension, is not possible on the engines; "
                "transpose the tile first (nl.transpose) or contract the partitions with nl.matmul "
                "against a ones vector",
            )
        result = fn(array, axis=axes, keepdims=True)
        if mask is not None:
            live = np.broadcast_to(mask_values(mask), array.shape).any(axis=axes, keepdims=True)
            result = np.where(live, result, 0)
        if not keepdims:
            result = result.squeeze(axes)
        return Tensor(result.astype(dtype or x.dtype), sbuf)

    reduce.__name__ = reduce.__qualname__ = name
    reduce.__doc__ = f"``nl.{name}`` over free axes ``axis`` (never the partition axis 0), in fp32."
    return reduce


sum = _reduction(np.sum, "sum")  # noqa: A001 - the NKI name
max = _reduction(np.max, "max")  # noqa: A001
min = _reduction(np.min, "min")  # noqa: A001
mean = _reduction(np.mean, "mean")
prod = _reduction(np.prod, "prod")
