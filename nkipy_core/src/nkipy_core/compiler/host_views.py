"""NumPy views of the CPU tensors a kernel is called with, remembered across calls.

A kernel of a CPU graph runs on NumPy views of its input tensors. Making one
(``Tensor.numpy()``) costs about 0.7 µs, as much as the work of a small kernel, and most inputs
of a compiled graph are the same tensor objects at every call: parameters, buffers, a static KV
cache, the input of a benchmark loop. ``HostViews`` keeps, per argument position, the view of
the tensor it saw there, and hands it out again while that same tensor comes back.

Nothing is kept alive by it. The tensor is held by a weak reference, and the kept view is made
over the tensor's memory without referring to the tensor (a view from ``numpy()`` would keep it
alive through its ``base``, and with it, e.g., every saved activation a backward kernel was
given). The view is used only while the same tensor object, still alive, has the same data
pointer, so it always reads the memory the tensor has now. Its shape, strides and dtype are
those of the compiled graph's input at that position, which dynamo's guards fix for every call
of a graph (a kernel is only called by the graph it was compiled for).

Positions whose tensor changes between calls (activations, a backward's saved tensors) stop
being tracked after one change, so they pay nothing beyond ``numpy()`` itself.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Sequence

import numpy as np
import torch

from nkipy_core.ir.types import torch_to_numpy

#: a position whose tensor changed between calls: not tracked any more
_UNTRACKED = False


class HostViews:
    """The NumPy arrays for one kernel's CPU arguments, by position (see the module docstring)."""

    __slots__ = ("_refs", "_pointers", "_views")

    def __init__(self, count: int):
        self._refs: list = [None] * count  # weakref.ref, None (not seen yet) or _UNTRACKED
        self._pointers = [0] * count
        self._views: list[np.ndarray | None] = [None] * count

    def arrays(self, args: Sequence[torch.Tensor]) -> list[np.ndarray]:
        """NumPy views of ``args`` (CPU tensors). Raises what ``Tensor.numpy()`` raises for a
        tensor it cannot view (bf16, tensors that require grad): the caller converts those."""
        refs, pointers, views = self._refs, self._pointers, self._views
        arrays = []
        for i, a in enumerate(args):
            ref = refs[i]
            if ref is _UNTRACKED:
                arrays.append(a.numpy())
            elif ref is not None and ref() is a and a.data_ptr() == pointers[i]:
                view = views[i]
                if view is None:  # the second call with this tensor: from now on, its view
                    view = views[i] = _detached_view(a.numpy())
                arrays.append(view)
            else:
                array = a.numpy()
                if ref is None:
                    refs[i], pointers[i] = weakref.ref(a), a.data_ptr()
                else:
                    refs[i], views[i] = _UNTRACKED, None
                arrays.append(array)
        return arrays


def host_arrays(args: Sequence[torch.Tensor]) -> list[np.ndarray] | None:
    """NumPy views of CPU tensors ``numpy()`` refuses (bf16, tensors that require grad), or
    ``None`` if any argument is not on CPU."""
    if not all(a.is_cpu for a in args):
        return None
    return [torch_to_numpy(a) for a in args]


def _detached_view(array: np.ndarray) -> np.ndarray:
    """``array``'s elements, over the same memory, without a reference to what owns it."""
    if array.size == 0:
        return np.empty(array.shape, array.dtype)  # no elements: nothing to share
    address = array.__array_interface__["data"][0]
    span = sum((n - 1) * s for n, s in zip(array.shape, array.strides)) + array.itemsize
    memory = (ctypes.c_char * span).from_address(address)
    return np.ndarray(array.shape, array.dtype, buffer=memory, strides=array.strides)
