"""Wire the ``nkipy`` device into torch: the PrivateUse1 name, generated ``Tensor.nkipy()``-style
methods, the ``torch.nkipy`` module, the backend hooks and device guard, the ATen kernels, and
dynamo's skip list (``untraced.py``)."""

from __future__ import annotations

import torch

from nkipy_core.buffers import device_contract
from nkipy_core.buffers.device_contract import NAME
from nkipy_core.device import aten, module, serialization, untraced
from nkipy_core.errors import DeviceError


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True  # asked by torch internals at odd times: never select a runtime here

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


def _clone_storage_on_the_device() -> None:
    """``UntypedStorage.clone`` (what ``copy.deepcopy`` of a tensor or module uses) allocates
    through the C++ allocator of the storage's device; a PrivateUse1 backend registered from
    Python has none, and torch would crash. Route clones of ``nkipy`` storages to the runtime."""
    torch_clone = torch.UntypedStorage.clone
    if getattr(torch_clone, "_nkipy", False):
        return

    def clone(self):
        if self.device.type == NAME:
            from nkipy_core.buffers import memory

            return memory.clone_storage(self)
        return torch_clone(self)

    clone._nkipy = True  # type: ignore[attr-defined]  # marks the patch as installed
    clone.__doc__ = torch_clone.__doc__
    torch.UntypedStorage.clone = clone  # type: ignore[method-assign]  # see the docstring


def _first_use(config) -> None:
    """The device's work at the first use of its memory (``memory.runtime()`` runs it through
    ``device_contract``, as the buffer layer does not import the device): route the ops the
    packs lower to the device and install its autocast policy. Not at registration: that runs
    inside ``import torch``, and this loads the plugins and makes ~300 registrations."""
    from nkipy_core.device import autocast
    from nkipy_core.plugin import manager as plugins

    aten.claim(plugins.get(strict=config.strict).lowerings.ops())
    autocast.install()


def register() -> None:
    """Register the device once per process; a no-op when it already is."""
    current = torch._C._get_privateuse1_backend_name()
    if current == NAME and getattr(torch, NAME, None) is module:
        return
    if current not in ("privateuseone", NAME):
        raise DeviceError(
            f"torch's PrivateUse1 backend is already registered as {current!r} by another package; "
            "the nkipy device needs it. Uninstall that package or disable its autoload "
            "(TORCH_DEVICE_BACKEND_AUTOLOAD=0) and import nkipy_core."
        )
    if current != NAME:
        torch.utils.rename_privateuse1_backend(NAME)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True, for_packed_sequence=True)
    torch._register_device_module(NAME, module)
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    aten.install()
    _clone_storage_on_the_device()
    torch.serialization.register_package(
        serialization.PRIORITY, serialization.tag, serialization.restore
    )
    untraced.skip_in_dynamo(__package__)
    device_contract.on_first_use(_first_use)
