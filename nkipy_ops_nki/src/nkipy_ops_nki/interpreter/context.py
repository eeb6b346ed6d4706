"""The launch context: which program of which launch is running now.

It is the interpreter's only mutable state, kept in a ``ContextVar`` so that nested or concurrent
launches (threads, asyncio) never see each other's program ids or outputs.
"""

from __future__ import annotations

from collections import Counter
from contextvars import ContextVar

import attrs
import numpy as np


@attrs.frozen
class Launch:
    """One ``run`` of a kernel: its source file (to locate errors), its grid, and the HBM outputs
    allocated so far, keyed by (shape, dtype, call site, n-th allocation there)."""

    kernel_file: str
    grid: tuple[int, ...]
    outputs: dict = attrs.field(factory=dict, eq=False)


@attrs.frozen
class Program:
    """One program (SPMD instance) of a launch."""

    launch: Launch
    ids: tuple[int, ...]
    allocations: Counter = attrs.field(factory=Counter, eq=False)

    def hbm_array(
        self, shape: tuple[int, ...], dtype: np.dtype, site: tuple[str, int]
    ) -> np.ndarray:
        """The array behind ``nl.ndarray(..., buffer=nl.shared_hbm)``: allocated by the first
        program, then the same one for every later program, so that SPMD programs that each store
        one part of an output all store into the one output."""
        key = (shape, np.dtype(dtype), site)
        self.allocations[key] += 1
        key = (*key, self.allocations[key])
        if key not in self.launch.outputs:
            self.launch.outputs[key] = np.zeros(shape, dtype)
        return self.launch.outputs[key]


current: ContextVar[Program | None] = ContextVar("nki_program", default=None)
