"""The emitter of ``random_bits``: Philox4x32-10 written out in integer ops.

It must give the bits of ``_random_bits`` in ``nkipy_core.ir.numpy_support`` exactly, so that
a program draws the same numbers on every runtime. HLO's ``rng-bit-generator`` (PHILOX) lays
out key and counter words its own way, so the ten rounds are built here, as the reference
computes them: on u64 words holding 32-bit values, each 32x32-bit multiply one u64 multiply
whose high and low halves are split by a shift and a mask. All blocks run at once, as vectors
indexed by an iota.
"""

from __future__ import annotations

import math

from nkipy_core.ir import DType, TensorType

from .builder import FunctionBuilder, Val, i64_array
from .registry import emits

_U64 = DType.u64
_LOW = 0xFFFFFFFF
#: Philox4x32 round multipliers and Weyl key increments (Salmon et al., SC 2011)
_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)
_ROUNDS = 10


def _word(b: FunctionBuilder, state: Val, i: int) -> Val:
    """``state[i]`` as a scalar."""
    one = b.op(
        "stablehlo.slice",
        [state],
        TensorType((1,), _U64),
        {
            "start_indices": i64_array([i]),
            "limit_indices": i64_array([i + 1]),
            "strides": i64_array([1]),
        },
    )
    return b.reshape(one, ())


def _philox(b: FunctionBuilder, key: Val, counter: Val, blocks: int) -> list[Val]:
    """The four output words of blocks ``counter + 0 .. counter + blocks-1`` (u64 vectors of
    32-bit values), keyed by the low and high words of ``key``."""
    vector = TensorType((blocks,), _U64)

    def op(name: str, x: Val | int, y: Val | int) -> Val:
        """Wrapping u64 ``name`` on block vectors; a scalar or a Python int is broadcast."""
        x, y = (
            b.full(v, vector) if isinstance(v, int) else b.broadcast(v, vector.shape)
            for v in (x, y)
        )
        return b.binary(name, x, y)

    def key_op(name: str, k: Val, c: int) -> Val:
        return b.binary(name, k, b.constant(c, _U64))

    k0, k1 = key_op("and", key, _LOW), key_op("shift_right_logical", key, 32)
    ctr = op("add", counter, b.iota(vector, 0))
    c0, c1, c2, c3 = (
        op("and", ctr, _LOW),
        op("shift_right_logical", ctr, 32),
        b.full(0, vector),
        b.full(0, vector),
    )
    for i in range(_ROUNDS):
        if i:
            k0, k1 = (
                key_op("and", key_op("add", k, step), _LOW) for k, step in zip((k0, k1), _KEY_STEPS)
            )
        p0, p1 = op("multiply", c0, _MULTIPLIERS[0]), op("multiply", c2, _MULTIPLIERS[1])
        c0, c1, c2, c3 = (
            op("xor", op("xor", op("shift_right_logical", p1, 32), c1), k0),
            op("and", p1, _LOW),
            op("xor", op("xor", op("shift_right_logical", p0, 32), c3), k1),
            op("and", p0, _LOW),
        )
    return [c0, c1, c2, c3]


@emits("random_bits")
def _random_bits(
    b: FunctionBuilder, result: TensorType, state: Val, *, shape: tuple, part: str
) -> Val:
    """Value ``i`` (row-major) is word ``i % 4`` of block ``state[1] + i // 4``; ``part='state'``
    is ``(state[0], state[1] + blocks)``, the u64 sum wrapping as the reference's does."""
    n = math.prod(shape)
    blocks = -(-n // 4)
    key, counter = _word(b, state, 0), _word(b, state, 1)
    if part == "state":
        advanced = b.binary("add", counter, b.constant(blocks, _U64))
        return b.op(
            "stablehlo.concatenate",
            [b.reshape(key, (1,)), b.reshape(advanced, (1,))],
            result,
            {"dimension": "0 : i64"},
        )
    columns = [b.reshape(w, (blocks, 1)) for w in _philox(b, key, counter, blocks)]
    words = b.op(
        "stablehlo.concatenate", columns, TensorType((blocks, 4), _U64), {"dimension": "1 : i64"}
    )
    flat = b.reshape(words, (4 * blocks,))
    first = b.op(
        "stablehlo.slice",
        [flat],
        TensorType((n,), _U64),
        {
            "start_indices": i64_array([0]),
            "limit_indices": i64_array([n]),
            "strides": i64_array([1]),
        },
    )
    return b.reshape(b.convert(first, DType.u32), result.shape)
