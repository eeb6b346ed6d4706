"""``torch.nkipy``: the device module torch finds by the device's name, like ``torch.cuda``.

One process drives one device, as with torchrun on Trainium (the runtime decides how many it
sees). The accelerator surface that FSDP2, DDP, DTensor and TorchTitan call is here, one module
per concern, as in PyTorch's reference out-of-tree backend: the current device (``guard``),
streams and events (``streams``), memory statistics and the memory limit (``memory_stats``), the
generator (``random``: the Philox seed and offset the device's kernels draw from) and what the
device is (``properties``).

Torch calls these functions from user code that dynamo compiles (``torch.random.fork_rng``,
``freeze_rng_state``); dynamo calls them without tracing them, as it does ``torch.cuda``'s
(``untraced.py``).
"""

from __future__ import annotations

import logging

from nkipy_core.device.guard import current_device, device, device_of, set_device
from nkipy_core.device.memory_stats import (
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
    transfer_stats,
)
from nkipy_core.device.properties import DeviceProperties, get_device_name, get_device_properties
from nkipy_core.device.random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from nkipy_core.device.streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
    synchronize,
)
from nkipy_core.errors import NkipyError

__all__ = [
    "DeviceProperties",
    "Event",
    "Stream",
    "StreamContext",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "get_rng_state_all",
    "init",
    "initial_seed",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
    "transfer_stats",
]

log = logging.getLogger("nkipy.device")

#: torch saves and restores the device's RNG state around activation checkpointing only for a
#: device module that says it is initialised (``torch.utils.checkpoint`` reads ``_initialized``,
#: as ``torch.cuda`` has it); the device needs no initialisation before use
_initialized = True


def is_available() -> bool:
    """Whether torch may pick ``nkipy`` as this machine's accelerator (``torch.accelerator``
    and device-generic code ask this): yes if a hardware runtime backs the device, or if the user
    asked for it (``NKIPY_RUNTIME=cpu``, ``init_nkipy_backend(runtime="cpu")``,
    ``register_device()``).

    A simulator such as the ``cpu`` runtime is not the machine's accelerator unless asked for:
    otherwise ``torch.accelerator.is_available()`` would move every program on a CPU machine onto
    it (registered without a request, as the test suites do, it answers False).

    Unless a runtime is named, no runtime is asked when the ``nkipy.hardware`` probes see no
    hardware (a hardware runtime comes with such a probe): torch's fake tensors ask this once per
    traced op (``FakeTensorMode.avoid_device_init``), and a runtime's ``available()`` may look
    for libraries and compilers in subprocesses (``nrt``: ~25 ms a call), which made dynamo's and
    AOTAutograd's traces of a Llama block seconds slower once nkipy's plugins were loaded.
    """
    from nkipy_core.config import settings as config
    from nkipy_core.device import request
    from nkipy_core.plugin import manager as plugins

    try:
        settings = config.peek()
        asked = settings.runtime is not None or request.requested()
        if not asked and not plugins.hardware_present():
            return False  # no probe sees hardware: answered without asking (or importing) any pack
        runtime = config.select_runtime(settings)
    except NkipyError:
        return False
    except Exception as exc:  # noqa: BLE001 - torch asks in every compile: a broken runtime must not break it
        log.warning(
            "torch.nkipy.is_available(): a runtime failed while asked: %s: %s",
            type(exc).__name__,
            exc,
        )
        return False
    return getattr(runtime, "hardware", False) or asked


def is_initialized() -> bool:
    return True


def init() -> None:
    """Bind this process to its device now rather than at its first tensor (``torch.cuda.init``'s
    role): the runtime's ``open_device``, if it has one. The ``nkipy`` process group calls this,
    so a host started with more ranks than devices fails in ``init_process_group``.

    The runtime is the one the settings so far select; the device does not commit to it, so
    ``init_nkipy_backend(runtime=...)`` may still follow."""
    from nkipy_core.config import settings as config

    open_device = getattr(config.select_runtime(config.peek()), "open_device", None)
    if open_device is not None:
        open_device()


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    """Devices torch may use as accelerators: 0 unless ``is_available()``, as torch expects."""
    from nkipy_core.buffers import memory

    return memory.device_count() if is_available() else 0


def get_amp_supported_dtype() -> list:
    """Half types the device computes (autocast and activation checkpointing ask)."""
    import torch

    return [torch.float16, torch.bfloat16]
