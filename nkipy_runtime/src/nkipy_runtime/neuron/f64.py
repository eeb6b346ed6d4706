"""f64 computed in f32, for users who opt in (``NKIPY_NEURON_F64=f32``).

No NeuronCore has f64, so by default an op on f64 runs as torch on CPU. A program that holds f64
only by habit (a ``torch.float64`` default, a NumPy-born buffer) can instead have its kernels
compute in f32, as Neuron's own inference wrapper converts fp64 inputs: the kernel is rebuilt
with every f64 type and literal narrowed to f32, and ``NrtRuntime.run`` converts its f64 inputs
and outputs on the host around it. Those conversions leave the kernel path, so they are counted
transfers and warned about once.
"""

from __future__ import annotations

from typing import Any

from nkipy_core.ir import ConstantData, DType, Kernel, KernelBuilder, TensorType


def _narrow(value: Any) -> Any:
    if value is DType.f64:
        return DType.f32
    if isinstance(value, TensorType) and value.dtype is DType.f64:
        return TensorType(value.shape, DType.f32)
    if isinstance(value, ConstantData) and value.dtype is DType.f64:
        return ConstantData.from_array(value.array, DType.f32)
    return value


def has_f64(kernel: Kernel) -> bool:
    return any(
        v.type.dtype is DType.f64
        for v in (*kernel.params, *kernel.outputs, *(op.result for op in kernel.ops))
    )


def narrow_f64(kernel: Kernel) -> Kernel:
    """``kernel`` with f64 replaced by f32 everywhere: parameters, results and literals."""
    kb = KernelBuilder(kernel.name)
    values = {p.id: kb.param(_narrow(p.type)) for p in kernel.params}
    for op in kernel.ops:
        params = {k: _narrow(v) for k, v in op.params.items()}
        with kb.building(op.origin):
            values[op.result.id] = kb.emit(op.prim, [values[o.id] for o in op.operands], params)
    return kb.finish([values[o.id] for o in kernel.outputs])


def narrow_type(t: TensorType) -> TensorType:
    """What a kernel's f64 parameter or result is on the device."""
    return _narrow(t)
