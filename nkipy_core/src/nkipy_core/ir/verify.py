"""The verifier: rejects an ill-typed or malformed kernel before any runtime sees it."""

from __future__ import annotations

from nkipy_core.errors import VerificationError
from nkipy_core.ir.graph import Kernel, Op
from nkipy_core.ir.primitives import infer
from nkipy_core.ir.printer import format_op


def verify(kernel: Kernel) -> None:
    """Check SSA form and re-infer every op's type; raise ``VerificationError`` naming the op."""
    defined: dict[int, object] = {}
    for p in kernel.params:
        if p.id in defined:
            raise VerificationError(f"kernel {kernel.name}: parameter %{p.name} is declared twice")
        defined[p.id] = p.type
    for op in kernel.ops:
        for v in op.operands:
            if defined.get(v.id) != v.type:
                raise _error(kernel, op, f"operand %{v.name} is used before it is defined")
        if op.result.id in defined:
            raise _error(kernel, op, f"%{op.result.name} is defined twice")
        try:
            expected = infer(op.prim, [v.type for v in op.operands], op.params)
        except TypeError as exc:
            raise _error(kernel, op, str(exc)) from None
        if expected != op.result.type:
            raise _error(kernel, op, f"result type should be {expected}, not {op.result.type}")
        defined[op.result.id] = op.result.type
    for out in kernel.outputs:
        if defined.get(out.id) != out.type:
            raise VerificationError(f"kernel {kernel.name}: output %{out.name} is never defined")


def _error(kernel: Kernel, op: Op, problem: str) -> VerificationError:
    """The error naming ``op`` (printed only for an error: printing every op, constants included,
    took most of the verifier's time)."""
    built = f" (built by {op.origin})" if op.origin else ""
    where = f"kernel {kernel.name}, op `{format_op(op, with_origin=False)}`{built}"
    return VerificationError(f"{where}: {problem}")
