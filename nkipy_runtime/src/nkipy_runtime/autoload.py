"""The ``torch.backends`` entry point of nkipy-runtime: on a Neuron host, the ``nkipy`` device is
there after ``import torch`` with no opt-in, as Trainium is for TorchNeuron's users.

Elsewhere nkipy-core registers the device only when asked (``nkipy_core.device.opt_in``); the
hardware is the one thing that asks for it by being present. Torch calls this inside every
``import torch`` and turns an exception into a failed import, so it only looks at the file
system (``nrt.probe``) and never raises.
"""

from __future__ import annotations

import logging


def autoload() -> None:
    try:
        try:
            from nkipy_runtime.nrt.probe import hardware_present
        except ImportError:
            # the probe itself is being imported (it imports nkipy_core, which imports torch,
            # which calls this): nkipy asking it after torch is up, not a Neuron host's start
            return
        if hardware_present():
            import nkipy_core

            nkipy_core.register_device()
    except Exception as exc:  # noqa: BLE001 - raising here would break `import torch` itself
        logging.getLogger("nkipy").warning(
            "the nkipy device was not registered on this Neuron host (%s: %s); "
            "`nkipy_core.register_device()` shows the full error",
            type(exc).__name__,
            exc,
        )
