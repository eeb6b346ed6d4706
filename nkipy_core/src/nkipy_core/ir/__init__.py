"""The NKIPy IR: types, primitives, kernels, and the passes and printers over them."""

from nkipy_core.ir.builder import KernelBuilder, Traced
from nkipy_core.ir.graph import ConstantData, Kernel, Op, Opaque, Value
from nkipy_core.ir.half_float import HalfFloat, half_float_rule
from nkipy_core.ir.primitives import PRIMITIVES, Primitive, primitive
from nkipy_core.ir.types import DType, TensorType, numpy_to_torch, torch_to_numpy
from nkipy_core.ir.verify import verify

__all__ = [
    "PRIMITIVES",
    "ConstantData",
    "DType",
    "HalfFloat",
    "Kernel",
    "KernelBuilder",
    "Op",
    "Opaque",
    "Primitive",
    "TensorType",
    "Traced",
    "Value",
    "half_float_rule",
    "numpy_to_torch",
    "primitive",
    "torch_to_numpy",
    "verify",
]
