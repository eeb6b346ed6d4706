"""IR text: the stable, human-readable form of a kernel that cache keys hash."""

from __future__ import annotations

from nkipy_core.ir.graph import Kernel, Op


def format_op(op: Op, with_origin: bool = True) -> str:
    operands = ", ".join(f"%{v.name}" for v in op.operands)
    params = ", ".join(f"{k}={v!r}" for k, v in op.attributes)
    text = f"%{op.result.name}: {op.result.type} = {op.prim}({operands})"
    if params:
        text += f" {{{params}}}"
    if with_origin and op.origin:
        text += f"  # {op.origin}"
    return text


def format_kernel(kernel: Kernel, with_origin: bool = True) -> str:
    params = ", ".join(f"%{p.name}: {p.type}" for p in kernel.params)
    lines = [f"kernel {kernel.name}({params}) {{"]
    lines += [f"  {format_op(op, with_origin)}" for op in kernel.ops]
    lines.append(f"  return {', '.join('%' + o.name for o in kernel.outputs)}")
    lines.append("}")
    return "\n".join(lines) + "\n"
