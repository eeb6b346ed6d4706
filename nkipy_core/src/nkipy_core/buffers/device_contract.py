"""What the layers below the ``nkipy`` device know of it: its name, and its first-use work.

The buffer layer (``memory``: tensors <-> runtime buffers) sits below the compiler, and the
device (``nkipy_core.device``: torch registration, ATen kernels, eager ops) sits on top of both,
so neither ``memory`` nor the compiler may import the device. Yet the device has work to do when
its memory is first used (routing the ops the packs lower to it, installing its autocast policy):
it registers that work here with ``on_first_use`` when torch registers the device, and
``memory.runtime()`` runs it once, when it chooses the runtime.

This module imports nothing of nkipy and nothing heavy: the device's registration, which runs
inside ``import torch``, imports it, and ``memory`` (numpy, the IR) must not be imported there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nkipy_core.config.settings import Config

#: the device's name in torch (``torch.device("nkipy")``, ``torch.nkipy``)
NAME = "nkipy"

_first_use: list[Callable[[Config], None]] = []


def on_first_use(fn: Callable[[Config], None]) -> None:
    """Call ``fn(config)`` when the device's runtime is chosen (its memory's first use), with
    the configuration that chose it. Registering the same function again does nothing."""
    if fn not in _first_use:
        _first_use.append(fn)


def first_use(config: Config) -> None:
    """Run the first-use work the device registered (``memory.runtime()`` calls this once)."""
    for fn in _first_use:
        fn(config)
