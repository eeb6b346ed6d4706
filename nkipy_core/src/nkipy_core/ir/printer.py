"""IR text: the stable, human-readable form of a kernel that cache keys hash.

The text names two kinds of attribute by content only: a large constant (or a small one, in
shortened digits) and an ``Opaque`` string. ``kernel_data`` gives their full content, so that text
and data together are the whole kernel (``parser.parse_kernel`` reads them back).
"""

from __future__ import annotations

from nkipy_core.ir.graph import ConstantData, Kernel, Op, Opaque


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


def data_key(result: str, attribute: str) -> str:
    """Where ``kernel_data`` keeps an attribute of the op defining ``result``: ``v3.value``."""
    return f"{result}.{attribute}"


def kernel_data(kernel: Kernel) -> dict[str, str]:
    """What the IR text of ``kernel`` shows only by digest or rounded: each constant's bytes
    (base64) and each ``Opaque`` attribute's text, by ``data_key``."""
    data: dict[str, str] = {}
    for op in kernel.ops:
        for name, value in op.attributes:
            if isinstance(value, ConstantData):
                data[data_key(op.result.name, name)] = value.b64()
            elif isinstance(value, Opaque):
                data[data_key(op.result.name, name)] = value.text
    return data
