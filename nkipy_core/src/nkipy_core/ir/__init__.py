"""The NKIPy IR: types, primitives, kernels, and the passes and printers over them."""

from .builder import KernelBuilder, Traced
from .graph import ConstantData, Kernel, Op, Opaque, Value
from .primitives import PRIMITIVES, Primitive, primitive
from .types import DType, TensorType, numpy_to_torch, torch_to_numpy
from .verify import verify

__all__ = [
    "PRIMITIVES", "ConstantData", "DType", "Kernel", "KernelBuilder", "Op", "Opaque", "Primitive",
    "TensorType", "Traced", "Value", "numpy_to_torch", "primitive", "torch_to_numpy", "verify",
]
