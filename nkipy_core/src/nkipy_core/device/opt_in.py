"""When the ``nkipy`` device exists in a process: only when asked for, or on Trainium.

torch makes a registered PrivateUse1 backend the machine's accelerator (``torch.accelerator``,
``torch._C._get_accelerator()``) the moment it is named, whatever the device reports about
itself; torch.distributed then asks that accelerator for barriers and default backends, and
libraries move models onto it. A simulator such as the ``cpu`` runtime must not take that place in
programs that never asked for nkipy, so the device is registered only:

- inside ``import torch`` when ``NKIPY_RUNTIME`` is set (``autoload``), or when a hardware runtime
  sees its device (nkipy-runtime's own autoload, on a Neuron host);
- by ``init_nkipy_backend(runtime=...)`` naming a runtime;
- by ``register_device()`` (``registration.py``), the explicit opt-in for code that wants the device whatever runtime
  backs it (the ``nkipy`` process group calls it when it is created).

Installing nkipy therefore changes nothing for the other programs of the environment, even those
that import nkipy_core (pytest loads its plugin, ``backend="nkipy"`` its dynamo backend).
"""

from __future__ import annotations

import functools

from nkipy_core.config import settings
from nkipy_core.device.registration import register_device


@functools.wraps(settings.init_nkipy_backend)
def init_nkipy_backend(*args, **kwargs) -> settings.Config:
    config = settings.init_nkipy_backend(*args, **kwargs)
    if config.runtime is not None:  # naming a runtime asks for the device that runs on it
        register_device()
    return config
