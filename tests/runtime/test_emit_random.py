"""The StableHLO emitter of ``random_bits`` gives the reference's Philox4x32-10 bits exactly
(``_random_bits`` in ``nkipy_core.ir.numpy_support``), run through XLA on this machine's CPU.

The state is a kernel input, so one kernel per shape serves every state. The states put the
key's two words and the counter at their edges: the low counter word wrapping into the high
one between blocks, the whole 64-bit counter wrapping to zero, all-ones keys.
"""

from __future__ import annotations

import numpy as np
import pytest
from xla_oracle import assert_same

from nkipy_core.ir import DType, KernelBuilder, TensorType

pytest.importorskip("jax", reason="the xla oracle needs the nkipy-runtime[xla] extra (jax, jaxlib)")

STATES = [
    (0, 0),
    (0x0123456789ABCDEF, 2**32 - 2),  # the low counter word carries into the high one
    (2**64 - 1, 2**64 - 2),  # the counter wraps to 0 after two blocks
    (0xFFFFFFFF, 2**64 - 1),  # key words at their bounds
    (2**63, 7),
]

#: 0-d, one value, sizes that are and are not multiples of 4 (a block), and no values at all
SHAPES = [(), (1,), (3,), (4,), (5, 3), (7, 9), (2, 0, 3), (0,)]


def _kernel(shape: tuple[int, ...], part: str):
    kb = KernelBuilder("random_bits")
    state = kb.param(TensorType((2,), DType.u64))
    return kb.finish([kb.emit("random_bits", [state], {"shape": shape, "part": part})])


@pytest.mark.parametrize("part", ["bits", "state"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_random_bits(shape, part):
    kernel = _kernel(shape, part)
    for state in STATES:
        assert_same(kernel, [np.array(state, dtype=np.uint64)])
