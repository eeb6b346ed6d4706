"""A kernel as one FX graph of ATen operations, traced from its ops' torch rules (``rules``)
with the decompositions TorchInductor expects of the graphs it compiles.

The graph takes the kernel's parameters and returns its outputs, except those ``writes`` puts
into a parameter: the graph copies each of those into its parameter (``copy_``), which
TorchInductor turns into the store of the loop that computes it, so an optimizer step updates
its tensors where they lie. It is traced with fake tensors: nothing is computed.

A product of half floats is lowered as ``convert`` to f32, ``dot``, ``convert`` back (the f32
products of half floats are exact, their sum is rounded once). torch's half-float matrix
products compute just that, at half the memory traffic and without the two widened copies, so
such a chain is traced as one product of the half floats (``half_products``), when it is large
enough: on a small product torch's half-float kernel costs a fixed 20 µs or so more than the
widened one (``HALF_PRODUCT_SIZE``).

TorchInductor computes an elementwise value inline in every loop that reads it: a value
broadcast to a larger shape is computed again for each element it is broadcast to. That is free
for an addition, not for a cosine: the rotary embedding's cosines and sines, broadcast over the
attention heads, were a third of a bf16 Llama block's time outside its products. Such a value,
computed with a transcendental function and broadcast to many more elements, is computed into
memory first (``computed_once``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from nkipy_core import _torch
from nkipy_core.ir import DType, Kernel, Op, Value

from . import rules

_HALF = (DType.bf16, DType.f16)
#: multiply-adds from which a half-float product runs on torch's half-float kernel: measured on
#: this project's benchmark machine, it is slower below (32x64 @ 64x64: 30 µs against 8 µs),
#: as fast at about this size, and twice as fast from 128x256 @ 256x256 up
HALF_PRODUCT_SIZE = 1 << 20

#: the primitives whose elements cost many times an addition's: those of libm's functions
TRANSCENDENTAL = frozenset(
    {"exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "atan",
     "atan2", "logistic", "erf", "erfc", "pow"}
)  # fmt: skip
#: the primitives TorchInductor computes inline, an element at a time, in the loops that read
#: them: the elementwise ones and those that only move elements
_INLINED = TRANSCENDENTAL | frozenset(
    {"abs", "add", "and", "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "broadcast",
     "ceil", "concatenate", "constant", "convert", "div", "eq", "floor", "floor_divide", "fmod",
     "ge", "gt", "iota", "isinf", "isnan", "le", "lt", "maximum", "minimum", "mul", "ne", "neg",
     "not", "or", "pad", "remainder", "reshape", "reverse", "round", "select", "sign", "signbit",
     "slice", "sub", "transpose", "xor"}
)  # fmt: skip
#: how many more elements a broadcast must have than its operand for the operand to be computed
#: once into memory (``computed_once``): below it, the loop and buffer that adds cost about as
#: much as the recomputation saved (a decode step's broadcasts, a few hundred elements, got slower)
RECOMPUTED_ELEMENTS = 4096


def trace(kernel: Kernel, writes: Sequence[tuple[int, int]] = ()) -> torch.fx.GraphModule:
    """The FX graph of ``kernel``; with ``writes``, pairs ``(output, parameter)``, the graph
    writes each such output into its parameter and returns the other outputs only."""
    written = {k for k, _ in writes}
    products = half_products(kernel)
    skipped = {dot.result.id for dot, _ in products.values()}
    once = computed_once(kernel)

    def run(*params: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values = {p.id: t for p, t in zip(kernel.params, params)}
        for op in kernel.ops:
            if op.result.id in skipped:
                continue  # its one use, a half-float product, reads the half floats
            if op.result.id in products:
                dot, (a, b) = products[op.result.id]
                operands, attributes, prim = (a, b), dot.params, "dot"
            else:
                operands, attributes, prim = op.operands, op.params, op.prim
            value = rules.run(
                prim,
                [values[v.id] for v in operands],
                attributes,
                [v.type for v in operands],
                op.result.type,
            )
            if op.result.id in once:
                value = _torch.force_stride_order(value, value.stride())
            values[op.result.id] = value
        outputs = [values[v.id] for v in kernel.outputs]
        for k, j in writes:
            params[j].copy_(outputs[k])
        return tuple(o for k, o in enumerate(outputs) if k not in written)

    return make_fx(run, decomposition_table=_torch.inductor_decompositions(), tracing_mode="fake")(
        *examples(kernel)
    )


def half_products(kernel: Kernel) -> dict[int, tuple[Op, tuple[Value, Value]]]:
    """The products of half floats widened to f32 and rounded back: for each ``convert`` of a
    ``dot``'s f32 result to a half float, when that is the result's only use and both of the
    ``dot``'s operands are ``convert``s of that half float to f32 and it makes at least
    ``HALF_PRODUCT_SIZE`` multiply-adds, the ``dot`` and the half-float operands, by the
    ``convert``'s result id."""
    producers = {op.result.id: op for op in kernel.ops}
    uses = Counter(v.id for op in kernel.ops for v in op.operands)
    uses.update(v.id for v in kernel.outputs)
    found = {}
    for op in kernel.ops:
        half = op.result.type.dtype
        dot = producers.get(op.operands[0].id) if op.prim == "convert" else None
        if (
            half not in _HALF
            or dot is None
            or dot.prim != "dot"
            or dot.result.type.dtype is not DType.f32
            or uses[dot.result.id] != 1
            or math.prod(dot.result.type.shape) * dot.operands[0].type.shape[-1] < HALF_PRODUCT_SIZE
        ):
            continue
        widened = [producers.get(v.id) for v in dot.operands]
        if all(
            w is not None
            and w.prim == "convert"
            and w.result.type.dtype is DType.f32
            and w.operands[0].type.dtype is half
            for w in widened
        ):
            found[op.result.id] = (dot, (widened[0].operands[0], widened[1].operands[0]))
    return found


def computed_once(kernel: Kernel) -> set[int]:
    """The ids of the values to compute into memory rather than inline in the loops that read
    them: each operand of a ``broadcast`` adding at least ``RECOMPUTED_ELEMENTS`` elements,
    when a transcendental primitive is among the inlined ops it is computed with (a value
    TorchInductor puts in memory anyway, a product's or a reduction's, ends that search)."""
    costly: dict[int, bool] = {}
    for op in kernel.ops:  # in program order: operands first
        costly[op.result.id] = op.prim in TRANSCENDENTAL or (
            op.prim in _INLINED and any(costly.get(v.id, False) for v in op.operands)
        )
    return {
        op.operands[0].id
        for op in kernel.ops
        if op.prim == "broadcast"
        and costly.get(op.operands[0].id, False)
        and math.prod(op.result.type.shape) - math.prod(op.operands[0].type.shape)
        >= RECOMPUTED_ELEMENTS
    }


def examples(kernel: Kernel) -> list[torch.Tensor]:
    """Tensors of the kernel's parameter types (zeros): what TorchInductor specialises on."""
    return [torch.zeros(p.type.shape, dtype=p.type.dtype.torch) for p in kernel.params]
