"""An NKI kernel as torch code calls it: ``kernel(a, b)`` or, with a launch grid, ``kernel[gx, gy](a, b, out)``.

Called on tensors (CPU or ``nkipy``) it runs now, through the NumPy interpreter: arguments are
staged to host arrays, results come back on the device of the first tensor argument, and
arguments the kernel writes (tutorial-style output buffers) are written back. While an op that
calls it is being lowered (``capture.py``) the call only records the launch.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from nkipy_core.ir import numpy_to_torch, torch_to_numpy

from . import capture, interpreter

Grid = tuple[Any, ...]

#: every kernel made in this process by its key: the host function of a custom call finds its
#: kernel here (or imports it, see ``custom_call.find_kernel``)
KERNELS: dict[str, NKIKernel] = {}


class NKIKernel:
    """A Python function written in the NKI language (``nkipy_ops_nki.nki.language``)."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        functools.update_wrapper(self, fn)

    @functools.cached_property
    def source(self) -> str:
        """The kernel's source, what a device compiler's NKI frontend reads; ``OSError`` when
        Python kept none (a kernel made by ``exec`` or ``python -c``)."""
        return textwrap.dedent(inspect.getsource(self.fn))

    @functools.cached_property
    def key(self) -> str:
        """``module:qualname#digest``: where the kernel is defined and what its source is. The
        kernel is findable by it from then on (``KERNELS``)."""
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:16]
        key = f"{self.fn.__module__}:{self.fn.__qualname__}#{digest}"
        KERNELS[key] = self
        return key

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        grid = grid if isinstance(grid, tuple) else (grid,)
        return lambda *args: self.launch(grid, args)

    def __call__(self, *args: Any) -> Any:
        return self.launch((), args)

    def launch(self, grid: Grid, args: Sequence[Any]) -> Any:
        recording = capture.current()
        if recording is not None:
            return recording.record(self, grid, args)
        return _run_on_tensors(self, grid, args)

    def run_arrays(self, grid: Grid, arrays: Sequence[Any]) -> list[np.ndarray]:
        """Run on NumPy arrays (and Python scalars); returns the kernel's returned tensors."""
        return interpreter.run(self.fn, list(arrays), grid)

    def __repr__(self) -> str:
        return f"<NKI kernel {self.fn.__module__}.{self.fn.__qualname__}>"


def _run_on_tensors(kernel: NKIKernel, grid: Grid, args: Sequence[Any]) -> Any:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors:  # NumPy arrays (baremetal style)
        return _one_or_tuple(kernel.run_arrays(grid, args))
    device = tensors[0].device
    staged = [_to_host(a) if isinstance(a, torch.Tensor) else a for a in args]
    results = kernel.run_arrays(grid, staged)
    for arg, array in zip(args, staged):  # output buffers the kernel wrote, on another device
        if isinstance(arg, torch.Tensor) and arg.device.type != "cpu":
            arg.copy_(numpy_to_torch(array))
    return _one_or_tuple([numpy_to_torch(np.array(r, copy=True)).to(device) for r in results])


def _one_or_tuple(outs: list[Any]) -> Any:
    """What the kernel returned: nothing, one tensor or several."""
    return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)


def _to_host(t: torch.Tensor) -> np.ndarray:
    """A host array of ``t``: a view of a CPU tensor (so the kernel's writes land in it), else a copy."""
    return torch_to_numpy(t.detach() if t.device.type == "cpu" else t.detach().cpu())
