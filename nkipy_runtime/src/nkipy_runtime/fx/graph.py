"""A kernel as one FX graph of ATen operations, traced from its ops' torch rules (``rules``).

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
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from nkipy_core.ir import DType, Kernel, Op, Value

from . import rules

_HALF = (DType.bf16, DType.f16)
#: multiply-adds from which a half-float product runs on torch's half-float kernel: measured on
#: this project's benchmark machine, it is slower below (32x64 @ 64x64: 30 µs against 8 µs),
#: as fast at about this size, and twice as fast from 128x256 @ 256x256 up
HALF_PRODUCT_SIZE = 1 << 20


def trace(kernel: Kernel, writes: Sequence[tuple[int, int]] = ()) -> torch.fx.GraphModule:
    """The FX graph of ``kernel``; with ``writes``, pairs ``(output, parameter)``, the graph
    writes each such output into its parameter and returns the other outputs only."""
    written = {k for k, _ in writes}
    products = half_products(kernel)
    skipped = {dot.result.id for dot, _ in products.values()}

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
            values[op.result.id] = rules.run(
                prim,
                [values[v.id] for v in operands],
                attributes,
                [v.type for v in operands],
                op.result.type,
            )
        outputs = [values[v.id] for v in kernel.outputs]
        for k, j in writes:
            params[j].copy_(outputs[k])
        return tuple(o for k, o in enumerate(outputs) if k not in written)

    return make_fx(run, tracing_mode="fake")(*examples(kernel))


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


def examples(kernel: Kernel) -> list[torch.Tensor]:
    """Tensors of the kernel's parameter types (zeros): what TorchInductor specialises on."""
    return [torch.zeros(p.type.shape, dtype=p.type.dtype.torch) for p in kernel.params]
