"""The ``torch.backends`` entry point: registers the ``nkipy`` device inside ``import torch`` when
``NKIPY_RUNTIME`` names a runtime (``opt_in.py`` says why only then).

Torch calls this while it is still importing, in every process of the user's environment, and
turns any exception into a failed ``import torch``. So it reads one environment variable, imports
nothing heavy and never raises: a failure is logged and leaves torch without the device.
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` skips it.
"""

from __future__ import annotations

import logging


def autoload() -> None:
    try:
        from nkipy_core.config import env

        if env.NKIPY_RUNTIME.get():
            from nkipy_core.device.registration import register

            register()
    except Exception as exc:  # noqa: BLE001 - raising here would break `import torch` itself
        logging.getLogger("nkipy").warning(
            "the nkipy device was not registered (%s: %s); `nkipy_core.register_device()` shows the full error",
            type(exc).__name__,
            exc,
        )
