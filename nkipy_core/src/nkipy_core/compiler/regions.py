"""Fine-grained control inside compiled models: CPU regions and kernel boundaries.

``with nkipy_core.on_cpu(): ...`` inside a compiled function keeps the ops traced in the block
on CPU as torch ops, even where a pack lowers them (e.g. for precision, or to debug a kernel).
The ops are tagged through ``torch.fx.traceback.annotate``, which dynamo and AOTAutograd carry
to every ATen node of the block, forward and backward. On ``nkipy`` tensors each op's inputs are
copied to the host and its results back: that traffic is what was asked for. (View ops in the
block compute no values and stay where they are.)

``nkipy_core.kernel_boundary(x)`` splits kernels: the ops before and after it are compiled as
separate kernels (it is never fused, never warned about, and costs one device copy of ``x``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.traceback import annotate

from nkipy_core import _torch
from nkipy_core.buffers import memory

_KEY = "nkipy"
_CPU = "cpu"


def on_cpu():
    """A context manager: ops traced inside it run on CPU in the compiled graph."""
    return annotate({_KEY: _CPU})


def in_cpu_region(node: torch.fx.Node) -> bool:
    return node.meta.get("custom", {}).get(_KEY) == _CPU


def run_on_cpu(op, *args, **kwargs) -> Any:
    """What a CPU-region node calls: ``op`` on host copies, results back on the device if any
    input was there."""
    on_device = False

    def to_host(x):
        nonlocal on_device
        if memory.is_nkipy(x):
            on_device = True
            return memory.to_host(x)
        return x

    result = op(*_torch.tree_map(to_host, args), **_torch.tree_map(to_host, kwargs))
    if not on_device:
        return result
    return _torch.tree_map(
        lambda x: memory.from_host(x) if isinstance(x, torch.Tensor) else x, result
    )


@torch.library.custom_op("nkipy::kernel_boundary", mutates_args=())
def _boundary(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_boundary.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


_boundary.register_autograd(lambda ctx, grad: grad)

BOUNDARY = torch.ops.nkipy.kernel_boundary.default


def kernel_boundary(x: torch.Tensor) -> torch.Tensor:
    """``x`` (a copy): the ops that produce it and the ops that use it go to separate kernels."""
    return _boundary(x)
