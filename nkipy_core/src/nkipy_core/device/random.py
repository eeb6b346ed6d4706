"""The ``nkipy`` device's generator in ``torch.nkipy``: ``get_rng_state``, ``manual_seed`` and the
rest of ``torch.cuda``'s random functions.

The state is the Philox seed and offset the device's kernels draw from, compiled and eager
(``nkipy_core.buffers.generator``), as 16 bytes laid out as CUDA's: so ``set_rng_state`` of a
saved state replays the device's numbers, ``torch.random.fork_rng`` and activation
checkpointing restore it, and DTensor's ``OffsetBasedRNGTracker`` moves its offset as on CUDA.
``torch.manual_seed`` and ``torch.seed`` seed it through ``manual_seed_all``.

Torch calls these from ``torch.manual_seed`` in every program, device or not: they import
nothing heavy and never choose the device's runtime.
"""

from __future__ import annotations

from typing import Any

import torch

from nkipy_core.buffers import generator
from nkipy_core.buffers.device_contract import NAME
from nkipy_core.device import guard
from nkipy_core.errors import DeviceError


def _index(device: Any) -> int:
    """The device index ``device`` names (an index, ``"nkipy:1"``, a ``torch.device``; ``None``
    or ``"nkipy"``: the current device)."""
    if device is None:
        return guard.current_device()
    if isinstance(device, int):
        index: int | None = device
    else:
        found = torch.device(device)
        if found.type != NAME:
            raise DeviceError(
                f"{found} is not an nkipy device; torch.nkipy's generator functions take 'nkipy', "
                f"'nkipy:N' or an index (torch.{found.type} has {found.type}'s generators)"
            )
        index = found.index
    return guard.current_device() if index is None else index


def get_rng_state(device: Any = "nkipy") -> torch.Tensor:
    """The generator state of ``device``: a CPU ``uint8`` tensor of 16 bytes, the Philox seed
    then the offset."""
    return generator.default(_index(device)).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    """The states of every device this process sees."""
    from nkipy_core.buffers import memory

    return [get_rng_state(i) for i in range(memory.device_count())]


def set_rng_state(new_state: torch.Tensor, device: Any = "nkipy") -> None:
    """Restore a state ``get_rng_state`` gave: the device draws the same numbers again."""
    generator.default(_index(device)).set_state(new_state)


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed: int) -> None:
    """Seed the current device's generator (offset 0)."""
    generator.default(_index(None)).manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator; ``torch.manual_seed`` calls this."""
    generator.seed_all(seed)


def seed() -> None:
    """Seed the current device's generator with a non-deterministic number."""
    generator.default(_index(None)).seed()


def seed_all() -> None:
    """Seed every device's generator with one non-deterministic number."""
    generator.seed_all(generator.default(_index(None)).seed())


def initial_seed() -> int:
    """The current device's seed (the last one set)."""
    return generator.default(_index(None)).initial_seed()
