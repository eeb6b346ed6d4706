"""Which ``nkipy`` device is current: ``torch.nkipy.current_device()``, ``set_device`` and the
``torch.nkipy.device(i)`` block, as ``torch.cuda``'s.

One process drives one device, as with torchrun on Trainium, so the current device is
``nkipy:0`` unless a program picks another index the runtime sees. Torch's generic functions
(``torch.accelerator.current_device_index()``, ``set_device_index``, ``device_index(i)``) go
through the device guard a Python backend registers (``registration._Guard``), which torch
implements in C++ for such a backend with one device, index 0: they answer and accept index 0.
"""

from __future__ import annotations

from typing import Any

import torch

_current = 0


def current_device() -> int:
    return _current


def set_device(device: Any) -> None:
    """Make ``device`` (an index, ``"nkipy:N"``, a ``torch.device``) current; ``"nkipy"``
    without an index keeps the current one."""
    from nkipy_core.buffers import memory

    index = device if isinstance(device, int) else memory.device_index(device)
    if index is None:  # "nkipy" without an index: the current device
        return
    memory.check_index(index)
    global _current
    _current = index


class device:  # noqa: N801 - named as torch.cuda.device, which device-generic torch code calls
    """``with torch.nkipy.device(i):`` runs the block with device ``i`` current (``None`` or a
    negative index: unchanged); activation checkpointing saves and restores RNG states in one."""

    def __init__(self, device: Any) -> None:
        self.index = device if isinstance(device, int) else _index_of(device)

    def __enter__(self) -> None:
        self.previous = _current
        if self.index is not None and self.index >= 0:
            set_device(self.index)

    def __exit__(self, *exc_info: object) -> None:
        global _current
        _current = self.previous


class device_of(device):  # noqa: N801 - as torch.cuda.device_of
    """``with torch.nkipy.device_of(t):`` runs the block on the device of tensor ``t`` (a CPU
    tensor changes nothing)."""

    def __init__(self, obj: torch.Tensor) -> None:
        super().__init__(obj.get_device() if obj.device.type != "cpu" else None)


def _index_of(device: Any) -> int | None:
    if device is None:
        return None
    return torch.device(device).index
