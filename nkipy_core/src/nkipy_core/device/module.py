"""``torch.nkipy``: the device module torch finds by the device's name, like ``torch.cuda``.

One process drives one device, as with torchrun on Trainium (the runtime decides how many it
sees). Random numbers for ``nkipy`` tensors are drawn by torch's CPU generator, so
``torch.manual_seed`` makes device runs reproduce CPU runs.

Torch calls these functions from user code that dynamo compiles (``torch.random.fork_rng``,
``freeze_rng_state``); dynamo calls them without tracing them, as it does ``torch.cuda``'s
(``untraced.py``).
"""

from __future__ import annotations

import logging
from typing import Any

from nkipy_core.errors import NkipyError

log = logging.getLogger("nkipy.device")

_current = 0


def _runtime():
    from nkipy_core.buffers import memory

    return memory.runtime()


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


def current_device() -> int:
    return _current


def set_device(device: Any) -> None:
    from nkipy_core.buffers import memory

    index = device if isinstance(device, int) else memory.device_index(device)
    if index is None:  # "nkipy" without an index: the current device
        return
    memory.check_index(index)
    global _current
    _current = index


def synchronize(device: Any = None) -> None:
    """Wait for the device's queued work; the runtimes here run kernels synchronously."""
    sync = getattr(_runtime(), "synchronize", None)
    if sync is not None:
        sync()


def memory_allocated(device: Any = None) -> int:
    """Bytes of device memory held by live tensors."""
    return _runtime().stats.allocated


def max_memory_allocated(device: Any = None) -> int:
    return _runtime().stats.max_allocated


def reset_peak_memory_stats(device: Any = None) -> None:
    stats = _runtime().stats
    stats.max_allocated = stats.allocated


def transfer_stats() -> dict[str, int]:
    """Host<->device transfers so far (counts and bytes), as counted by the runtime."""
    return _runtime().stats.transfers()


def get_amp_supported_dtype() -> list:
    """Half types the device computes (autocast and activation checkpointing ask)."""
    import torch

    return [torch.float16, torch.bfloat16]


def manual_seed_all(seed: int) -> None:
    """Nothing to seed: device random numbers come from torch's CPU generator."""


def get_rng_state(device: Any = None):
    import torch

    return torch.get_rng_state()


def set_rng_state(state, device: Any = None) -> None:
    import torch

    torch.set_rng_state(state)
