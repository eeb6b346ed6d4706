"""A whole kernel as a StableHLO module: ``func.func @main`` over the kernel's parameters.

Half floats follow the cpu runtime exactly: each op computes as nkipy-core's
``half_float_rule`` says (f16/bf16 operands of a ``half_compute`` primitive widened to f32 and the
result rounded once; a conversion from f64, i64 or i32 to a half float through f32). Every op carries its origin (the ATen op and rule
that built it) as its MLIR location, which becomes HLO ``metadata.op_name`` for profilers.
"""

from __future__ import annotations

import json
import re

from nkipy_core.errors import NkipyError
from nkipy_core.ir import DType, HalfFloat, Kernel, Op, TensorType, half_float_rule

from . import (  # noqa: F401 - register emitters
    collectives,
    convolution,
    custom_calls,
    elementwise,
    indexing,
    random,
    reductions,
    shapes,
)
from .builder import FunctionBuilder, Val, tensor_type
from .registry import EMITTERS


class EmissionError(NkipyError):
    """A kernel holds a primitive this version of nkipy-runtime cannot emit."""


def _f32(t: TensorType) -> TensorType:
    return TensorType(t.shape, DType.f32) if t.dtype.is_half else t


def emit_op(b: FunctionBuilder, op: Op, operands: list[Val]) -> Val:
    """Write one IR op, half floats computed as ``half_float_rule`` says."""
    try:
        emitter = EMITTERS[op.prim]
    except KeyError:
        raise EmissionError(
            f"nkipy-runtime has no StableHLO emitter for primitive {op.prim!r}; upgrade "
            "nkipy-runtime to a version made for this nkipy-core"
        ) from None
    result = op.result.type
    params = op.params
    rule = half_float_rule(op.prim, [o.type for o in operands], result)
    if rule is HalfFloat.CONVERT_THROUGH_F32:
        return b.convert(b.convert(operands[0], DType.f32), result.dtype)
    if rule is HalfFloat.EXACT:
        return emitter(b, result, *operands, **params)
    wide = emitter(
        b,
        _f32(result),
        *[b.convert(o, DType.f32) if o.dtype.is_half else o for o in operands],
        **params,
    )
    return b.convert(wide, result.dtype)


def _location(origin: str) -> str:
    return f" loc({json.dumps(origin)})" if origin else ""


def module_name(kernel: Kernel) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", kernel.name) or "kernel"


def emit_module(kernel: Kernel, *, narrow_int64: bool = False, xla_cpu: bool = False) -> str:
    """StableHLO text of ``kernel``; ``narrow_int64`` for a target that computes 64-bit
    integers in 32 bits, ``xla_cpu`` for XLA's CPU backend (see
    ``FunctionBuilder``).

    Kernels are pure: an in-place op of the program is a kernel result that the compiled graph
    writes back into its input afterwards (a device copy), so the module declares no
    input/output aliases."""
    b = FunctionBuilder(narrow_int64=narrow_int64, xla_cpu=xla_cpu)
    env: dict[int, Val] = {}
    params = []
    for i, p in enumerate(kernel.params):
        env[p.id] = Val(f"%arg{i}", p.type)
        params.append(f"%arg{i}: {tensor_type(p.type)}")
    for op in kernel.ops:
        start = len(b.lines)
        env[op.result.id] = emit_op(b, op, [env[v.id] for v in op.operands])
        loc = _location(op.origin)
        b.lines[start:] = [line + loc if line.startswith("%") else line for line in b.lines[start:]]
    outputs = [env[o.id] for o in kernel.outputs]
    b.returns(outputs, "func.return")
    results = ", ".join(tensor_type(o.type) for o in outputs)
    body = "\n".join("    " + line for line in b.lines)
    return (
        f"module @{module_name(kernel)} {{\n"
        f"  func.func public @main({', '.join(params)}) -> ({results}) {{\n{body}\n  }}\n}}\n"
    )
