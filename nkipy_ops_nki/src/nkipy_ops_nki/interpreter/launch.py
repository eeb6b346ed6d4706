"""Launch grids and running a kernel: every program of the grid, one after another.

On hardware the programs of a grid run in parallel, across logical NeuronCores for an
``nl.spmd_dim`` dimension. Here they run sequentially in row-major order, sharing the HBM
tensors, which gives the same result for any kernel whose programs write disjoint parts.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Sequence

import attrs
import numpy as np

from nkipy_ops_nki.errors import NKIError
from nkipy_ops_nki.interpreter.context import Launch, Program, current
from nkipy_ops_nki.interpreter.location import kernel_error
from nkipy_ops_nki.interpreter.tiles import Tensor, shared_hbm


@attrs.frozen
class NeuronCores:
    """``nl.nc(k)``: k logical NeuronCores that a grid dimension is spread over."""

    count: int


def nc(count: int) -> NeuronCores:
    return NeuronCores(count)


@attrs.frozen
class SpmdDim:
    """``nl.spmd_dim(n, nl.nc(k))``: a grid dimension of n * k programs; program p runs on
    logical core p % k."""

    programs: int
    cores: int = 1

    @property
    def size(self) -> int:
        return self.programs * self.cores


def spmd_dim(programs: int, cores: NeuronCores | int = 1) -> SpmdDim:
    return SpmdDim(programs, cores.count if isinstance(cores, NeuronCores) else cores)


def _program(axis: int) -> Program:
    program = current.get()
    if program is None:
        raise kernel_error(
            NKIError,
            "no kernel launch is running; run the kernel with interpreter.run(fn, arrays, grid)",
        )
    rank = len(program.ids)
    if not (0 <= axis < rank or (axis == 0 and rank == 0)):
        raise kernel_error(
            NKIError,
            f"axis {axis} is beyond the launch grid of rank {rank}; "
            f"launch with a grid of at least {axis + 1} dimension(s)",
        )
    return program


def program_id(axis: int) -> int:
    """The index of the running program along grid ``axis``."""
    program = _program(axis)
    return program.ids[axis] if program.ids else 0


def num_programs(axis: int) -> int:
    """The number of programs along grid ``axis``."""
    program = _program(axis)
    return program.launch.grid[axis] if program.ids else 1


def program_ndim() -> int:
    """The rank of the launch grid."""
    return len(_program(0).ids)


def run(fn: Callable, arrays: Sequence, grid: Sequence[int | SpmdDim] = ()) -> list[np.ndarray]:
    """Run kernel ``fn`` once per program of ``grid`` (row-major) and return its outputs.

    NumPy array arguments become HBM tensors over the same memory (so kernels that store into
    output arguments write the caller's arrays); other arguments pass through. The returned
    HBM tensor(s) come back as arrays; a kernel returning nothing gives ``[]``.
    """
    sizes = tuple(d.size if isinstance(d, SpmdDim) else int(d) for d in grid)
    launch = Launch(inspect.unwrap(fn).__code__.co_filename, sizes)
    args = [Tensor(a, shared_hbm) if isinstance(a, np.ndarray) else a for a in arrays]
    returned = None
    for ids in itertools.product(*(range(s) for s in sizes)):
        token = current.set(Program(launch, ids))
        try:
            returned = fn(*args)
        finally:
            current.reset(token)
    if returned is None:
        return []
    outputs = list(returned) if isinstance(returned, (tuple, list)) else [returned]
    for out in outputs:
        if not (isinstance(out, Tensor) and not out.buffer.on_chip):
            raise NKIError(
                f"kernel {fn.__name__} returned {out!r}; "
                "return HBM tensors made with nl.ndarray(..., buffer=nl.shared_hbm)"
            )
    return [out.data for out in outputs]
