"""What the ``nkipy`` device is: ``torch.nkipy.get_device_name()`` and ``get_device_properties()``,
as ``torch.cuda``'s, from what the device's runtime says of itself.

Device-generic code reads a few fields of ``torch.<device>.get_device_properties(i)``: ``name``
and ``total_memory`` (TorchTitan's memory monitor computes its percentages from it); those are
here under those names, with what nkipy adds (the runtime, whether it is hardware).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nkipy_core.device import guard, memory_stats

# a dataclass, not an attrs class: ``torch.nkipy`` imports this module inside ``import torch``,
# where importing attrs would cost every program


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """One ``nkipy`` device as its runtime describes it."""

    #: what the device is (``"nkipy cpu runtime (NumPy on the host)"``, a NeuronCore's name)
    name: str
    #: bytes of device memory in all (for the ``cpu`` runtime, the host's), or the memory limit
    #: if the runtime does not say (0 when neither is known)
    total_memory: int
    #: the runtime that drives it (``cpu``, ``nrt``, ``xla``)
    runtime: str
    #: whether that runtime drives hardware (``nrt``) or simulates it (``cpu``)
    hardware: bool
    index: int = 0
    type: str = "nkipy"


def _runtime(device: Any):
    from nkipy_core.buffers import memory

    memory.check_index(memory.device_index(device))
    return memory.runtime()


def get_device_name(device: Any = None) -> str:
    """What the device is, as its runtime names it (``device_name``), else its runtime's name."""
    runtime = _runtime(device)
    return getattr(runtime, "device_name", None) or f"nkipy ({runtime.name} runtime)"


def get_device_properties(device: Any = None) -> DeviceProperties:
    from nkipy_core.buffers import memory

    runtime = _runtime(device)
    index = memory.device_index(device)
    return DeviceProperties(
        name=get_device_name(device),
        total_memory=memory_stats.total_memory(device),
        runtime=runtime.name,
        hardware=bool(getattr(runtime, "hardware", False)),
        index=guard.current_device() if index is None else index,
    )
