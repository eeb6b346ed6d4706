"""Memory of the ``nkipy`` device: ``torch.nkipy.memory_allocated()`` and the rest of
``torch.cuda``'s memory functions, from the runtime's own numbers (``DeviceStats``).

Every buffer the runtime makes or frees is counted (tensors, kernel results, staged inputs).
There is no caching allocator in between: a freed buffer goes back to the runtime at once, so
"reserved" memory is the allocated memory and ``empty_cache()`` has nothing to release. The
names and keys are CUDA's, so monitors written for it (TorchTitan's ``DeviceMemoryMonitor``:
``memory_stats()["active_bytes.all.peak"]``, ``get_device_properties().total_memory``) read the
device unchanged.

The memory limit (``init_nkipy_backend(memory_limit=...)``, ``NKIPY_MEMORY_LIMIT``, or
``set_per_process_memory_fraction``) caps what the device holds: past it an allocation raises
``DeviceOutOfMemoryError``, a ``torch.OutOfMemoryError``.

``torch.accelerator.memory.*`` cannot reach these numbers: torch asks the C++ allocator of the
device for them (a ``c10::DeviceAllocator``), which only a C++ extension can register (see
docs/device.md).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from nkipy_core.errors import DeviceError


def _stats(device: Any = None):
    """The runtime's ``DeviceStats``; ``device`` (an index, a name) must be one this process
    sees."""
    from nkipy_core.buffers import memory
    from nkipy_core.device import fusion

    memory.check_index(memory.device_index(device))
    fusion.synchronize(
        "memory statistics"
    )  # queued ops hold their inputs and reserve their results
    return memory.runtime().stats


def memory_allocated(device: Any = None) -> int:
    """Bytes of device memory held now by tensors, kernel results and staged inputs."""
    return _stats(device).allocated


def max_memory_allocated(device: Any = None) -> int:
    """The most bytes held at once since the peaks were last reset (``reset_peak_memory_stats``)."""
    return _stats(device).max_allocated


def memory_reserved(device: Any = None) -> int:
    """Bytes the device holds from its runtime: what is allocated (nothing is cached)."""
    return _stats(device).allocated


def max_memory_reserved(device: Any = None) -> int:
    return _stats(device).max_allocated


def reset_peak_memory_stats(device: Any = None) -> None:
    """Start the peaks again from what is held now."""
    _stats(device).reset_peaks()


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """Start the totals (allocations, frees, their bytes, out-of-memory refusals) again."""
    _stats(device).reset_accumulated()


def memory_stats(device: Any = None) -> OrderedDict[str, int]:
    """The device's memory counters under ``torch.cuda.memory_stats()``'s keys (``.all`` only:
    there are no pools). Bytes are ``allocated_bytes``; as nothing is cached, ``reserved_bytes``,
    ``active_bytes`` and ``requested_bytes`` are the same numbers, and every buffer is its own
    segment. ``current``/``peak`` are now and the most since ``reset_peak_memory_stats``;
    ``allocated``/``freed`` are totals since ``reset_accumulated_memory_stats``."""
    stats = _stats(device)
    bytes_ = {
        "current": stats.allocated,
        "peak": stats.max_allocated,
        "allocated": stats.allocated_total,
        "freed": stats.freed_total,
    }
    counts = {
        "current": stats.buffers,
        "peak": stats.max_buffers,
        "allocated": stats.allocations,
        "freed": stats.frees,
    }
    found: dict[str, int] = {}
    for name in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
        found.update({f"{name}.all.{k}": v for k, v in bytes_.items()})
    for name in ("allocation", "segment", "active"):
        found.update({f"{name}.all.{k}": v for k, v in counts.items()})
    found.update(
        num_alloc_retries=0,
        num_ooms=stats.ooms,
        num_sync_all_streams=0,
        num_device_alloc=stats.allocations,
        num_device_free=stats.frees,
    )
    return OrderedDict(sorted(found.items()))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """``(free, total)`` bytes: the device's own numbers (for the ``cpu`` runtime, the host's),
    within the memory limit if one is set (what the next allocation may take, and of what)."""
    from nkipy_core.buffers import memory

    stats = _stats(device)
    info = getattr(memory.runtime(), "memory_info", None)
    if info is not None:
        free, total = info()
    elif stats.limit is not None:
        free, total = stats.limit, stats.limit
    else:
        raise DeviceError(
            f"the {memory.runtime().name!r} runtime does not report its memory, and no memory limit "
            "is set: set one (init_nkipy_backend(memory_limit=...), NKIPY_MEMORY_LIMIT) to have it "
            "reported"
        )
    if stats.limit is not None:
        free, total = min(free, max(stats.limit - stats.allocated, 0)), min(total, stats.limit)
    return free, total


def total_memory(device: Any = None) -> int:
    """The device's memory in all, as its runtime reports it, else the memory limit (0 when
    neither is known)."""
    from nkipy_core.buffers import memory

    stats = _stats(device)
    info = getattr(memory.runtime(), "memory_info", None)
    if info is not None:
        return info()[1]
    return stats.limit or 0


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Limit the device memory this process holds to ``fraction`` of the device's total (as
    ``torch.cuda``'s): an allocation past it raises ``DeviceOutOfMemoryError``. It replaces any
    limit set before; a later configuration that changes ``memory_limit`` replaces it."""
    if not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise DeviceError(
            f"a memory fraction is a number in (0, 1], got {fraction!r}; for an absolute limit use "
            "init_nkipy_backend(memory_limit=...) or NKIPY_MEMORY_LIMIT"
        )
    total = total_memory(device)
    if not total:
        raise DeviceError(
            "the device's runtime does not report its total memory, so a fraction of it cannot be "
            "computed; set an absolute limit with init_nkipy_backend(memory_limit=...) or "
            "NKIPY_MEMORY_LIMIT"
        )
    _stats(device).limit = max(int(total * fraction), 1)


def get_per_process_memory_fraction(device: Any = None) -> float:
    """The memory limit as a fraction of the device's total (1.0 without a limit)."""
    limit, total = _stats(device).limit, total_memory(device)
    return 1.0 if limit is None or not total else min(limit / total, 1.0)


def empty_cache() -> None:
    """Release cached memory: there is none, freed buffers go back to the runtime at once."""


def transfer_stats() -> dict[str, int]:
    """Host<->device transfers so far (counts and bytes), as counted by the runtime."""
    return _stats().transfers()
