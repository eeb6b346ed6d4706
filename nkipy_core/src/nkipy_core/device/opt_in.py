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
from collections.abc import Callable
from typing import ParamSpec

from nkipy_core.config import settings
from nkipy_core.device.registration import register_device

_P = ParamSpec("_P")


def _registers_the_device(
    init: Callable[_P, settings.Config],
) -> Callable[_P, settings.Config]:
    """``init`` (the configuration layer's, which cannot import the device), then the device
    registered when the configuration names a runtime: naming one asks for the device on it."""

    @functools.wraps(init)
    def init_and_register(*args: _P.args, **kwargs: _P.kwargs) -> settings.Config:
        config = init(*args, **kwargs)
        if config.runtime is not None:
            register_device()
        return config

    return init_and_register


init_nkipy_backend = _registers_the_device(settings.init_nkipy_backend)
