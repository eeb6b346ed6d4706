"""Simplification passes over kernels: constant folding, view composition, squares,
multiplications by one, CSE and DCE.

Each pass is a pure function ``Kernel -> Kernel``; ``simplify`` runs them to a fixed point. Rules
are written naively (every scalar becomes a constant, every op is emitted), so these passes are
what keeps generated kernels small and readable.
"""

from __future__ import annotations

import numpy as np

from nkipy_core.ir.codegen import evaluate
from nkipy_core.ir.graph import ConstantData, Kernel, Op, Value
from nkipy_core.ir.primitives import primitive

#: folding must not turn a cheap broadcast into a huge literal in the kernel
FOLD_LIMIT = 1024


def dead_code_elimination(kernel: Kernel) -> Kernel:
    live = {v.id for v in kernel.outputs}
    kept: list[Op] = []
    for op in reversed(kernel.ops):
        if op.result.id in live:
            kept.append(op)
            live.update(v.id for v in op.operands)
    return Kernel(kernel.name, kernel.params, reversed(kept), kernel.outputs)


def _rename(kernel: Kernel, ops: list[Op], renamed: dict[int, Value]) -> Kernel:
    outputs = [renamed.get(v.id, v) for v in kernel.outputs]
    return Kernel(kernel.name, kernel.params, ops, outputs)


def common_subexpression_elimination(kernel: Kernel) -> Kernel:
    seen: dict[tuple, Value] = {}
    renamed: dict[int, Value] = {}
    ops: list[Op] = []
    for op in kernel.ops:
        operands = tuple(renamed.get(v.id, v) for v in op.operands)
        key = (op.prim, tuple(v.id for v in operands), op.attributes)
        if key in seen:
            renamed[op.result.id] = seen[key]
            continue
        seen[key] = op.result
        ops.append(Op(op.prim, operands, op.attributes, op.result, op.origin))
    return _rename(kernel, ops, renamed)


def constant_folding(kernel: Kernel) -> Kernel:
    """Evaluate ops whose operands are all small constants, using the primitives' NumPy semantics."""
    constants: dict[int, ConstantData] = {}
    ops: list[Op] = []
    for op in kernel.ops:
        if op.prim == "constant":
            constants[op.result.id] = op.params["value"]
        elif (
            op.prim != "broadcast"  # a broadcast scalar is cheaper and clearer than its literal
            and primitive(op.prim).folds  # not collectives nor custom calls
            and op.operands
            and all(v.id in constants for v in op.operands)
            and op.result.type.size <= FOLD_LIMIT
        ):
            arrays = [constants[v.id].array for v in op.operands]
            value = evaluate(op.prim, arrays, op.params, op.result.type)
            folded = ConstantData.from_array(value, op.result.type.dtype)
            constants[op.result.id] = folded
            op = Op("constant", (), {"value": folded}, op.result, op.origin)
        ops.append(op)
    return Kernel(kernel.name, kernel.params, ops, kernel.outputs)


def compose_views(kernel: Kernel) -> Kernel:
    """A reshape of a reshape reads the first one's operand, and so does a transpose of a
    transpose (permutations composed); a composition that is the identity is its operand.

    Rules chain views (``x.view(...).view(...)``, a permute undone by another) and each link is a
    call on the cpu runtime; DCE then drops the links nothing else reads."""
    defs: dict[int, Op] = {}
    renamed: dict[int, Value] = {}
    ops: list[Op] = []
    for op in kernel.ops:
        op = Op(
            op.prim,
            tuple(renamed.get(v.id, v) for v in op.operands),
            op.attributes,
            op.result,
            op.origin,
        )
        inner = defs.get(op.operands[0].id) if op.prim in ("reshape", "transpose") else None
        if inner is not None and inner.prim == op.prim:
            source = inner.operands[0]
            if op.prim == "reshape":
                attributes = {"shape": op.params["shape"]}
                identity = source.type.shape == op.result.type.shape
            else:
                perm = tuple(inner.params["perm"][p] for p in op.params["perm"])
                attributes = {"perm": perm}
                identity = perm == tuple(range(len(perm)))
            if identity:
                renamed[op.result.id] = source
                continue
            op = Op(op.prim, (source,), attributes, op.result, op.origin)
        defs[op.result.id] = op
        ops.append(op)
    return _rename(kernel, ops, renamed)


def square_by_multiplication(kernel: Kernel) -> Kernel:
    """``pow(x, 2)`` (a constant 2, possibly broadcast) becomes ``mul(x, x)``.

    That is what torch computes (its CPU pow kernel multiplies for an exponent of 2, and XLA's
    simplifier does the same): exactly rounded, where NumPy's ``power`` calls ``powf``, which may
    be an ulp off, at four times the cost of a multiplication."""
    twos: set[int] = set()
    ops: list[Op] = []
    for op in kernel.ops:
        if op.prim == "constant" and np.all(op.params["value"].array == 2):
            twos.add(op.result.id)
        elif op.prim == "broadcast" and op.operands[0].id in twos:
            twos.add(op.result.id)
        elif op.prim == "pow" and op.operands[1].id in twos:
            op = Op("mul", (op.operands[0], op.operands[0]), {}, op.result, op.origin)
        ops.append(op)
    return Kernel(kernel.name, kernel.params, ops, kernel.outputs)


def multiplications_by_one(kernel: Kernel) -> Kernel:
    """``x * 1``, ``1 * x`` and ``x / 1`` (a constant one, possibly broadcast) are ``x`` when they
    have ``x``'s type: exact in every dtype, NaN, infinities and signed zeros included.

    Decompositions write them (torch's single-tensor Adam multiplies its first moment by a
    ``1`` that dynamo traces as a constant); each is a pass over the whole array on the cpu
    runtime, a tenth of an AdamW step's NumPy work."""
    ones: set[int] = set()
    renamed: dict[int, Value] = {}
    ops: list[Op] = []
    for op in kernel.ops:
        operands = tuple(renamed.get(v.id, v) for v in op.operands)
        if op.prim == "constant" and np.all(op.params["value"].array == 1):
            ones.add(op.result.id)
        elif op.prim == "broadcast" and operands[0].id in ones:
            ones.add(op.result.id)
        elif op.prim in ("mul", "div"):
            kept = [
                x
                for x, other in (operands, operands[::-1])[: 2 if op.prim == "mul" else 1]
                if other.id in ones and x.type == op.result.type
            ]
            if kept:
                renamed[op.result.id] = kept[0]
                continue
        ops.append(Op(op.prim, operands, op.attributes, op.result, op.origin))
    return _rename(kernel, ops, renamed)


def simplify(kernel: Kernel) -> Kernel:
    while True:
        new = dead_code_elimination(
            common_subexpression_elimination(
                multiplications_by_one(
                    square_by_multiplication(compose_views(constant_folding(kernel)))
                )
            )
        )
        if new == kernel:
            return new
        kernel = new
