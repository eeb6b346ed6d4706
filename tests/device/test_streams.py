"""Streams and events of the ``nkipy`` device (``nkipy_core.device.streams``): real
``torch.Stream``/``torch.Event`` objects over one synchronous queue, enough for what FSDP2,
DDP and timing code call."""

import threading

import pytest
import torch

from nkipy_core import DeviceError, init_nkipy_backend

nkipy = torch.nkipy


def test_streams_are_torch_streams_of_the_device_and_all_the_one_queue():
    s = nkipy.Stream(priority=-1)  # as FSDP2 makes its all-gather and reduce-scatter streams
    assert isinstance(s, torch.Stream) and s.device == torch.device("nkipy", 0)
    assert s == nkipy.Stream() == nkipy.default_stream() == torch.Stream("nkipy")
    assert len({s: 1, nkipy.Stream(): 2}) == 1  # FSDP2 keys its last events by stream
    assert s.query() and s.synchronize() is None


def test_the_current_stream_follows_stream_contexts_and_set_stream():
    s, other = nkipy.Stream(), nkipy.Stream()
    assert nkipy.current_stream() is nkipy.default_stream()
    with nkipy.stream(s):
        assert nkipy.current_stream() is s
        with other:
            assert nkipy.current_stream() is other
        assert nkipy.current_stream() is s
    assert nkipy.current_stream() is nkipy.default_stream()
    with nkipy.stream(None):  # as torch.cuda.stream(None): nothing changes
        assert nkipy.current_stream() is nkipy.default_stream()
    nkipy.set_stream(s)
    try:
        assert nkipy.current_stream() is s
        nkipy.set_stream(None)
        assert nkipy.current_stream() is s
    finally:
        nkipy.set_stream(nkipy.default_stream())


def test_the_current_stream_is_per_thread():
    s, seen = nkipy.Stream(), []
    with nkipy.stream(s):
        thread = threading.Thread(target=lambda: seen.append(nkipy.current_stream()))
        thread.start()
        thread.join()
    assert seen == [nkipy.default_stream()] and seen[0] is not s


def test_another_devices_stream_is_a_typed_error():
    with pytest.raises(DeviceError, match="cpu is not an nkipy device"):
        nkipy.Stream("cpu")
    with pytest.raises(DeviceError, match="pass an nkipy stream"):
        nkipy.set_stream(torch.Stream("cpu"))


def test_waiting_orders_nothing_away_and_returns():
    """Kernels run to completion when called: every wait is already satisfied."""
    s, event = nkipy.Stream(), nkipy.Event()
    x = torch.ones(3, device="nkipy")
    with nkipy.stream(s):
        y = x * 2
    nkipy.current_stream().wait_stream(s)
    event.record(s)
    nkipy.current_stream().wait_event(event)
    torch.accelerator.current_stream().wait_event(event)  # FSDP2 does this with torch's stream
    event.wait()
    assert event.query() and event.synchronize() is None
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))


def test_events_are_torch_events_recorded_on_the_current_stream():
    event = nkipy.Event()
    assert isinstance(event, torch.Event) and event.device.type == "nkipy"
    assert event.record() is None  # FSDP2 stores `Event().record()`: None, as for CUDA
    recorded = nkipy.Stream().record_event()
    assert isinstance(recorded, nkipy.Event) and recorded.query()


def test_elapsed_time_between_timing_events_in_milliseconds():
    start, end = nkipy.Event(enable_timing=True), nkipy.Event(enable_timing=True)
    start.record()
    torch.ones(64, device="nkipy").sum().item()
    end.record()
    end.synchronize()
    assert 0 <= start.elapsed_time(end) < 60_000


def test_elapsed_time_refuses_events_without_timing_or_not_recorded():
    start, end = nkipy.Event(), nkipy.Event()
    start.record(), end.record()
    with pytest.raises(DeviceError, match="enable_timing=True"):
        start.elapsed_time(end)
    with pytest.raises(DeviceError, match="both events recorded"):
        nkipy.Event(enable_timing=True).elapsed_time(nkipy.Event(enable_timing=True))


def test_record_stream_of_a_device_tensor():
    x = torch.ones(4, device="nkipy")
    x.record_stream(nkipy.Stream())
    x.record_stream(torch.accelerator.current_stream())
    assert torch.equal(x.cpu(), torch.ones(4))


def test_torchs_generic_streams_and_events_of_the_device():
    """``torch.Stream("nkipy")`` and ``torch.Event("nkipy")`` go through torch's C++ guard for
    Python backends: they work, all but what that guard does not implement."""
    init_nkipy_backend(runtime="cpu")  # the accelerator, for torch.accelerator
    s, event = torch.Stream("nkipy"), torch.Event("nkipy")
    s.wait_stream(torch.accelerator.current_stream())
    s.record_event(event)
    s.wait_event(event)
    assert event.query() and s.query()
    assert torch.accelerator.current_stream() == nkipy.current_stream()
    torch.accelerator.set_stream(nkipy.Stream())
    with pytest.raises(RuntimeError, match="doesn't support synchronizing events"):
        event.synchronize()  # torch's guard for Python backends lacks it: use nkipy.Event
    with pytest.raises(RuntimeError, match="doesn't support synchronizing all streams"):
        torch.accelerator.synchronize()  # likewise: torch.nkipy.synchronize() is the way
    nkipy.synchronize()


def test_fsdp2_makes_and_uses_its_streams_through_torch_nkipy():
    """FSDP2's communication context, as it is set up on the device (``_get_device_handle``
    gives ``torch.nkipy``)."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPCommContext

    context = FSDPCommContext()
    context.lazy_init(torch.device("nkipy", 0))
    assert context.device_handle is nkipy
    copy_in, gather = context.get_all_gather_streams(False, TrainingState.FORWARD)
    assert isinstance(copy_in, nkipy.Stream) and isinstance(gather, nkipy.Stream)
    gather.wait_stream(copy_in)
    with context.device_handle.stream(gather):
        event = context.device_handle.Event()
        event.record()
    context.device_handle.current_stream().wait_event(event)
