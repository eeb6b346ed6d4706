"""Wire the ``nkipy`` device into torch: the PrivateUse1 name, generated ``Tensor.nkipy()``-style
methods, the ``torch.nkipy`` module, the backend hooks and device guard, the ATen kernels, and
the marks that keep dynamo out of the device's code (``untraced.py``). Nothing of torch itself is
patched."""

from __future__ import annotations

import torch

from nkipy_core import _torch
from nkipy_core.buffers import device_contract
from nkipy_core.buffers.device_contract import NAME
from nkipy_core.device import aten, module, request, serialization, untraced
from nkipy_core.errors import DeviceError


class _Hooks(_torch.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True  # asked by torch internals at odd times: never select a runtime here

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(_torch.DeviceGuard):
    def type_(self):
        return _torch.PRIVATEUSE1


def _first_use(config) -> None:
    """The device's work at the first use of its memory (``memory.runtime()`` runs it through
    ``device_contract``, as the buffer layer does not import the device): give the ATen kernels
    the eager ops, route the ops the packs lower to the device and install its autocast policy.
    Not at registration: that runs inside ``import torch``, and this imports the compiler, loads
    the plugins and makes ~300 registrations."""
    from nkipy_core.device import autocast, eager, fusion
    from nkipy_core.plugin import manager as plugins

    aten.run_eagerly_with(eager.run)
    fusion.install()
    aten.claim(plugins.get(strict=config.strict).lowerings.ops())
    autocast.install()


def register_device() -> None:
    """Make the ``nkipy`` device known to torch in this process, as torch's accelerator:
    ``.to("nkipy")``, ``torch.nkipy``, ``torch.accelerator`` and ``init_device_mesh("nkipy", ...)``.

    Not needed with ``NKIPY_RUNTIME`` set, after ``init_nkipy_backend(runtime=...)`` or on a
    Neuron host (see ``opt_in.py`` for why the device is not always there); idempotent."""
    register()
    request.record()


def register() -> None:
    """Register the device once per process; a no-op when it already is. Without
    ``register_device``'s request, the ``cpu`` simulator is registered but not available as the
    accelerator (what the test suites use)."""
    current = _torch.privateuse1_backend_name()
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
    _torch.register_device_module(NAME, module)
    _torch.register_privateuse1_hooks(_Hooks())
    _torch.register_privateuse1_device_guard(_Guard())
    aten.install()
    torch.serialization.register_package(
        serialization.PRIORITY, serialization.tag, serialization.restore
    )
    untraced.skip_in_dynamo(module, _Hooks, _Guard, serialization)
    device_contract.on_first_use(_first_use)
