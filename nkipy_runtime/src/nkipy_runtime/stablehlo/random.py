"""The emitter of ``random_bits``: Philox4x32-10 written out in 32-bit integer ops.

It must give the bits of ``_random_bits`` in ``nkipy_core.ir.numpy_support`` exactly, so that
a program draws the same numbers on every runtime. HLO's ``rng-bit-generator`` (PHILOX) lays
out key and counter words its own way, so the ten rounds are built here, as the reference
computes them. All blocks run at once, as vectors indexed by an iota.

Every integer is a u32: Neuron has no 64-bit integer arithmetic on trn1 (it cuts 64-bit integers
to 32 bits and rejects larger u64 constants), so the module holds no 64-bit integer at all.
Philox's 32x32->64-bit multiplies are therefore done on 16-bit limbs, whose products all fit a
u32 exactly: no multiply relies on wrapping, which a compiler may not implement the way XLA
does. The 64-bit block counter is two u32 words added with an explicit carry. Shifts are
logical; the only wrapping ops are the u32 additions of the key schedule and the counter words.
"""

from __future__ import annotations

import math

from nkipy_core.ir import DType, TensorType

from .builder import FunctionBuilder, Val, i64_array
from .registry import emits

_U32 = DType.u32
_LOW = 0xFFFFFFFF
_LIMB = 0xFFFF
#: Philox4x32 round multipliers and Weyl key increments (Salmon et al., SC 2011)
_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)
_ROUNDS = 10


def _word(b: FunctionBuilder, state: Val, i: int) -> Val:
    """``state[i]`` as a scalar."""
    one = b.op(
        "stablehlo.slice",
        [state],
        TensorType((1,), _U32),
        {
            "start_indices": i64_array([i]),
            "limit_indices": i64_array([i + 1]),
            "strides": i64_array([1]),
        },
    )
    return b.reshape(one, ())


class _Words:
    """u32 ops on values of one shape, a Python int standing for a constant of that shape; each
    constant is written once (a draw uses a few dozen, each many times)."""

    def __init__(self, b: FunctionBuilder, shape: tuple[int, ...]) -> None:
        self.b, self.type = b, TensorType(shape, _U32)
        self._constants: dict[int, Val] = {}

    def __call__(self, name: str, x: Val, y: Val | int) -> Val:
        """``stablehlo.<name>`` of ``x`` and ``y``."""
        if isinstance(y, int):
            if y not in self._constants:
                self._constants[y] = self.b.full(y, self.type)
            y = self._constants[y]
        return self.b.binary(name, x, y)

    def add64(self, lo: Val, hi: Val, add_lo: Val | int, add_hi: int) -> tuple[Val, Val]:
        """The low and high words of ``hi:lo + add_hi:add_lo``, 64-bit numbers held as u32 words,
        wrapping at 2**64: the low words' sum wraps below ``lo`` exactly when it carries."""
        low = self("add", lo, add_lo)
        carry = self.b.convert(self.b.compare("LT", low, lo, "UNSIGNED"), _U32)
        if add_hi:
            hi = self("add", hi, add_hi)
        return low, self("add", hi, carry)

    def multiply(self, a: Val, m: int) -> tuple[Val, Val]:
        """The high and low words of the 64-bit product ``a * m``, from 16-bit limbs: each
        partial product is below 2**32, and so is every sum of the carry column ``mid``."""
        op = self
        a_hi, a_lo = op("shift_right_logical", a, 16), op("and", a, _LIMB)
        m_hi, m_lo = m >> 16, m & _LIMB
        ll, lh = op("multiply", a_lo, m_lo), op("multiply", a_lo, m_hi)
        hl, hh = op("multiply", a_hi, m_lo), op("multiply", a_hi, m_hi)
        mid = op("shift_right_logical", ll, 16)
        for part in (lh, hl):
            mid = op("add", mid, op("and", part, _LIMB))
        lo = op("or", op("and", ll, _LIMB), op("shift_left", op("and", mid, _LIMB), 16))
        hi = hh
        for carried in (lh, hl, mid):
            hi = op("add", hi, op("shift_right_logical", carried, 16))
        return hi, lo


def _philox(b: FunctionBuilder, key: list[Val], counter: list[Val], blocks: int) -> list[Val]:
    """The four output words of blocks ``counter + 0 .. counter + blocks-1`` (u32 vectors),
    keyed by the two key words; ``counter`` is the 64-bit counter's low and high words."""
    op, key_op = _Words(b, (blocks,)), _Words(b, ())
    c0, c1 = op.add64(*(b.broadcast(w, (blocks,)) for w in counter), b.iota(op.type, 0), 0)
    c2 = c3 = b.full(0, op.type)
    k0, k1 = key
    for i in range(_ROUNDS):
        if i:
            k0, k1 = (key_op("add", k, step) for k, step in zip((k0, k1), _KEY_STEPS))
        hi0, lo0 = op.multiply(c0, _MULTIPLIERS[0])
        hi1, lo1 = op.multiply(c2, _MULTIPLIERS[1])
        c0, c1, c2, c3 = (
            op("xor", op("xor", hi1, c1), b.broadcast(k0, (blocks,))),
            lo1,
            op("xor", op("xor", hi0, c3), b.broadcast(k1, (blocks,))),
            lo0,
        )
    return [c0, c1, c2, c3]


@emits("random_bits")
def _random_bits(
    b: FunctionBuilder, result: TensorType, state: Val, *, shape: tuple, part: str
) -> Val:
    """Value ``i`` (row-major) is word ``i % 4`` of block ``counter + i // 4``; ``part='state'``
    is the key words and ``counter + blocks``, wrapping at 2**64 as the reference's does."""
    n = math.prod(shape)
    blocks = -(-n // 4)
    key, counter = [_word(b, state, i) for i in (0, 1)], [_word(b, state, i) for i in (2, 3)]
    if part == "state":
        lo, hi = _Words(b, ()).add64(*counter, blocks & _LOW, (blocks >> 32) & _LOW)
        words = [b.reshape(w, (1,)) for w in (*key, lo, hi)]
        return b.op("stablehlo.concatenate", words, result, {"dimension": "0 : i64"})
    if blocks > 1 << 32:
        raise ValueError(
            f"random_bits of {n} values: more than 2**34 values in one draw (the block index "
            "is a u32)"
        )
    columns = [b.reshape(w, (blocks, 1)) for w in _philox(b, key, counter, blocks)]
    words = b.op(
        "stablehlo.concatenate", columns, TensorType((blocks, 4), _U32), {"dimension": "1 : i64"}
    )
    flat = b.reshape(words, (4 * blocks,))
    first = b.op(
        "stablehlo.slice",
        [flat],
        TensorType((n,), _U32),
        {
            "start_indices": i64_array([0]),
            "limit_indices": i64_array([n]),
            "strides": i64_array([1]),
        },
    )
    return b.reshape(first, result.shape)
