"""Streams and events of the ``nkipy`` device: what ``torch.cuda``'s are to CUDA code.

The device has one queue, in program order: eager ops are queued and run as fused kernels by
one worker thread, in the order they were flushed (``fusion``), and any use of a buffer outside
the queue waits for the kernels that touch it. Every stream is that queue. That is a valid
implementation of torch's stream semantics (work on a stream runs in order; waiting on an event
or stream orders work after it), so code written for CUDA streams runs unchanged and correctly:
FSDP2's all-gather and reduce-scatter streams (``torch.nkipy.Stream``, ``wait_stream``,
``stream(...)``, ``Event().record()``, ``current_stream().wait_event``),
``tensor.record_stream`` (a no-op kernel: a queued kernel holds the tensors it reads, so none
of its buffers is freed under it), and events that time a region (``elapsed_time``).

``Stream`` and ``Event`` are ``torch.Stream`` and ``torch.Event``: torch's C++ code takes them
(``torch.accelerator.current_stream().wait_event(event)``) and they compare and hash like the
generic objects, all streams equal to each other. The generic objects torch makes itself
(``torch.Stream("nkipy")``, ``torch.accelerator.current_stream()``) go through the device guard
a Python backend registers (``torch._C._acc.DeviceGuard``), whose stream and event operations
torch implements in C++, for such a backend, as the default stream and events that are complete
at once; only ``torch.Event("nkipy").synchronize()`` / ``.elapsed_time()`` and
``torch.accelerator.synchronize()`` are missing from that guard, and no Python code can add them
(docs/device.md says what to use instead).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch

from nkipy_core.buffers.device_contract import NAME
from nkipy_core.errors import DeviceError


def synchronize(device: Any = None) -> None:
    """Run the device's queued eager ops (``fusion``) and wait for its work. The runtimes here
    run kernels synchronously, so the rest is nothing unless a runtime queues work and says how
    to wait for it (``synchronize``)."""
    from nkipy_core.buffers import memory
    from nkipy_core.device import fusion

    fusion.synchronize("synchronize")
    wait = getattr(memory.runtime(), "synchronize", None)
    if wait is not None:
        wait()


def _device(device: Any) -> torch.device:
    """The ``nkipy`` device ``device`` names (an index, a name, a ``torch.device``; ``None``:
    the current one); a typed error for another device type."""
    if device is None or isinstance(device, int):
        return torch.device(NAME, device or 0)
    found = torch.device(device)
    if found.type != NAME:
        raise DeviceError(
            f"{found} is not an nkipy device: nkipy streams and events live on 'nkipy'. Use "
            f"torch.{found.type}'s for {found.type} work."
        )
    return torch.device(NAME, found.index or 0)


class Stream(torch.Stream):
    """A stream of the ``nkipy`` device, as FSDP2 makes them (``torch.nkipy.Stream(priority=-1)``).

    Every stream is the device's one queue, so streams compare equal to each other and to
    ``torch.accelerator.current_stream()``; ``priority`` is accepted and changes nothing.
    ``with stream:`` makes it the current stream, as ``torch.nkipy.stream(s)`` does."""

    def __new__(cls, device: Any = None, priority: int = 0) -> Stream:
        return super().__new__(cls, device=_device(device), priority=priority)

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        """Record ``event`` (a new ``Event`` if none) on this stream and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def synchronize(self) -> None:
        """Wait for the work queued on this stream (the device's: ``synchronize()``)."""
        synchronize()

    def __enter__(self) -> Stream:
        _current.saved.append(_current.stream)
        set_stream(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        _current.stream = _current.saved.pop()


class Event(torch.Event):
    """An event of the ``nkipy`` device. ``synchronize()`` runs the queued eager ops and waits
    for every kernel in flight. With ``enable_timing=True`` recording waits for the work before
    it and keeps the host time, so ``start.elapsed_time(end)`` is the time the device took
    between them."""

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> Event:
        return super().__new__(
            cls,
            device=torch.device(NAME),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        self.enable_timing = enable_timing
        #: ``time.perf_counter()`` when last recorded; ``None`` until then
        self.recorded_at: float | None = None

    def record(self, stream: torch.Stream | None = None) -> None:
        """Record the event on ``stream`` (default: the current stream). A timing event waits
        for the work queued before it, so that its time is when that work is done."""
        if self.enable_timing:
            synchronize()
        super().record(current_stream() if stream is None else stream)
        self.recorded_at = time.perf_counter()

    def synchronize(self) -> None:
        """Wait until the work before the event is done (the device's: ``synchronize()``)."""
        synchronize()

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds from this event's record to ``end_event``'s, as CUDA events give them."""
        if not (isinstance(end_event, Event) and self.enable_timing and end_event.enable_timing):
            raise DeviceError(
                "elapsed_time needs two torch.nkipy.Event objects created with enable_timing=True; "
                "create both as torch.nkipy.Event(enable_timing=True)"
            )
        if self.recorded_at is None or end_event.recorded_at is None:
            raise DeviceError(
                "elapsed_time needs both events recorded: call start.record() and end.record() "
                "around the work to time first"
            )
        return (end_event.recorded_at - self.recorded_at) * 1000.0


class _Current(threading.local):
    """The current stream of each thread (as CUDA's is per thread; ``None``: the default), and
    the ones ``with stream:`` blocks will restore."""

    def __init__(self) -> None:
        self.stream: torch.Stream | None = None
        self.saved: list[torch.Stream | None] = []


_current = _Current()
_default: dict[int, Stream] = {}


def default_stream(device: Any = None) -> Stream:
    """The device's default stream (the one queue, as every stream)."""
    index = _device(device).index or 0
    found = _default.get(index)
    if found is None:
        found = _default.setdefault(index, Stream(index))
    return found


def current_stream(device: Any = None) -> torch.Stream:
    """The stream this thread last made current (``set_stream``, ``stream(...)``), else the
    default stream."""
    return _current.stream if _current.stream is not None else default_stream(device)


def set_stream(stream: torch.Stream | None) -> None:
    """Make ``stream`` this thread's current stream (``None`` changes nothing, as for CUDA)."""
    if stream is None:
        return
    if stream.device.type != NAME:
        raise DeviceError(
            f"torch.nkipy.set_stream got a stream of {stream.device}; pass an nkipy stream "
            "(torch.nkipy.Stream(), torch.nkipy.current_stream())"
        )
    _current.stream = stream


class StreamContext:
    """Makes ``stream`` the current stream inside a ``with`` block and the previous one after
    it; ``None`` does nothing (``torch.nkipy.stream(s)``, as ``torch.cuda.stream``)."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self.previous: torch.Stream | None = None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is not None:
            self.previous = _current.stream
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc_info: object) -> None:
        if self.stream is not None:
            _current.stream = self.previous


def stream(stream: torch.Stream | None) -> StreamContext:
    """``with torch.nkipy.stream(s):`` runs the block with ``s`` as the current stream."""
    return StreamContext(stream)
