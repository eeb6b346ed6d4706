"""The StableHLO emitter of ``random_bits`` gives the reference's Philox4x32-10 bits exactly
(``_random_bits`` in ``nkipy_core.ir.numpy_support``), run through XLA on this machine's CPU.

The state is a kernel input, so one kernel per shape serves every state. The states put the
key's two words and the counter at their edges: the low counter word carrying into the high
one between blocks, the whole 64-bit counter wrapping to zero, all-ones key words. The module
holds no 64-bit integer (Neuron has no 64-bit integer arithmetic on trn1).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from xla_oracle import assert_same

from nkipy_core.ir import DType, KernelBuilder, TensorType
from nkipy_runtime.stablehlo import emit_module

pytest.importorskip("jax", reason="the xla oracle needs the nkipy-runtime[xla] extra (jax, jaxlib)")

_LOW = 0xFFFFFFFF


def _state(key: int, counter: int) -> tuple[int, int, int, int]:
    """The u32[4] state of a 64-bit key and counter: low words first."""
    return (key & _LOW, key >> 32, counter & _LOW, counter >> 32)


STATES = [
    _state(0, 0),
    _state(0x0123456789ABCDEF, 2**32 - 2),  # the low counter word carries into the high one
    _state(0x0123456789ABCDEF, 5 * 2**32 - 1),  # ... into a high word that is not zero
    _state(2**64 - 1, 2**64 - 2),  # the counter wraps to 0 after two blocks; all-ones key
    _state(0xFFFFFFFF, 2**64 - 1),  # key words at their bounds; the counter wraps at once
    _state(2**63, 7),
]

#: 0-d, one value, sizes that are and are not multiples of 4 (a block), and no values at all
SHAPES = [(), (1,), (3,), (4,), (5, 3), (7, 9), (2, 0, 3), (0,)]


def _kernel(shape: tuple[int, ...], part: str):
    kb = KernelBuilder("random_bits")
    state = kb.param(TensorType((4,), DType.u32))
    return kb.finish([kb.emit("random_bits", [state], {"shape": shape, "part": part})])


@pytest.mark.parametrize("part", ["bits", "state"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_random_bits(shape, part):
    kernel = _kernel(shape, part)
    for state in STATES:
        assert_same(kernel, [np.array(state, dtype=np.uint32)])


@pytest.mark.parametrize("part", ["bits", "state"])
def test_the_module_has_no_64_bit_integers(part):
    """No value of any op is a 64-bit integer; only attributes (dimensions) are i64."""
    text = emit_module(_kernel((5, 3), part))
    assert "ui32" in text
    assert re.findall(r"tensor<[^>]*i64>", text) == []


def test_the_state_after_more_than_2_to_the_32_blocks():
    """The block count's high word is added too (a state is only arithmetic, whatever the size)."""
    kernel = _kernel((5, 2**32 + 1), "state")
    for state in STATES:
        assert_same(kernel, [np.array(state, dtype=np.uint32)])


def test_a_draw_of_more_blocks_than_a_u32_counts_is_refused():
    with pytest.raises(ValueError, match="more than 2\\*\\*34 values"):
        emit_module(_kernel((4, 2**32 + 1), "bits"))
