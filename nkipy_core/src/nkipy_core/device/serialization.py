"""``torch.save`` / ``torch.load`` of ``nkipy`` tensors.

Saving needs nothing from us beyond storages torch can copy to CPU (``set_`` and ``_copy_from``).
Loading a ``nkipy:N`` location would make torch allocate device storage through a C++ allocator
the device does not have, so this deserializer, registered ahead of torch's PrivateUse1 one,
moves the loaded CPU bytes into a device buffer instead.
"""

from __future__ import annotations

import torch

from nkipy_core.buffers.device_contract import NAME

#: ahead of torch's own PrivateUse1 entry (23) in ``torch.serialization``'s package registry
PRIORITY = 19


def tag(storage) -> str | None:
    if storage.device.type == NAME:
        return str(storage.device)
    return None


def restore(storage, location: str):
    if not location.startswith(NAME):
        return None
    from nkipy_core.buffers import memory

    memory.check_index(memory.device_index(location))
    host = torch.empty(0, dtype=torch.uint8).set_(storage)
    return memory.from_host(host).untyped_storage()
