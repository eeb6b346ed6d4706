"""The emitter table: one StableHLO emitter per NKIPy primitive.

An emitter is ``fn(b, result, *operands, **params) -> Val``: it writes the ops that compute
one primitive into ``b`` (a ``FunctionBuilder``) and returns the value holding the result.
``params`` are the op's attributes, ``result`` its inferred type. Emitters see operands and
results of the type they compute in: for a ``half_compute`` primitive on f16/bf16 the module
writer converts to f32 around the emitter (one rounding per op, as the cpu runtime does), so
emitters never handle half floats themselves.

The table must cover ``nkipy_core.ir.PRIMITIVES`` exactly; ``missing()`` says what it lacks and a
test fails on it, so a new primitive in the core cannot reach a kernel this pack cannot emit.
"""

from __future__ import annotations

from collections.abc import Callable

from nkipy_core.ir import PRIMITIVES

from .builder import FunctionBuilder, Val

Emitter = Callable[..., Val]

EMITTERS: dict[str, Emitter] = {}


def emits(*names: str) -> Callable[[Emitter], Emitter]:
    """Register the decorated function as the emitter of primitive(s) ``names``."""

    def register(fn: Emitter) -> Emitter:
        for name in names:
            if name in EMITTERS:
                raise ValueError(
                    f"primitive {name!r} already has an emitter ({EMITTERS[name].__qualname__})"
                )
            EMITTERS[name] = fn
        return fn

    return register


def missing() -> list[str]:
    """Primitives of the installed core that have no emitter (should be empty)."""
    return sorted(set(PRIMITIVES) - set(EMITTERS))


__all__ = ["EMITTERS", "Emitter", "FunctionBuilder", "Val", "emits", "missing"]
