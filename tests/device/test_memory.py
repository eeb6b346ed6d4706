"""Memory of the ``nkipy`` device (``nkipy_core.device.memory_stats``, ``buffers.memory``): the
runtime's own numbers under ``torch.cuda``'s names, the memory limit and its typed
out-of-memory error, and storages resized in place as FSDP2 frees and brings back parameters."""

import gc

import pytest
import torch

from nkipy_core import ConfigurationError, DeviceError, NkipyError, init_nkipy_backend
from nkipy_core.buffers import memory
from nkipy_core.config import settings as config
from nkipy_core.errors import DeviceOutOfMemoryError

nkipy = torch.nkipy
MIB = 1 << 20


@pytest.fixture(autouse=True)
def _no_limit_left_behind():
    """The device's runtime outlives a test's configuration: no test leaves its limit to the next."""
    yield
    config.reset()
    config.current()  # a configuration without a limit...
    memory.runtime().stats.limit = None  # ...and none set since


def test_allocated_bytes_follow_tensors_and_peaks_reset():
    gc.collect()
    base = nkipy.memory_allocated()
    nkipy.reset_peak_memory_stats()
    x = torch.empty(MIB // 4, device="nkipy")  # 1 MiB of f32
    assert nkipy.memory_allocated() == base + MIB == nkipy.memory_reserved()
    y = x + x  # a kernel result is device memory too
    assert nkipy.memory_allocated() == base + 2 * MIB
    del x, y
    gc.collect()
    assert nkipy.memory_allocated() == base
    assert nkipy.max_memory_allocated() == base + 2 * MIB == nkipy.max_memory_reserved()
    nkipy.reset_peak_memory_stats()
    assert nkipy.max_memory_allocated() == base


def test_memory_stats_has_cudas_keys_as_monitors_read_them():
    nkipy.reset_accumulated_memory_stats()
    x = torch.empty(256, device="nkipy")
    del x
    gc.collect()
    stats = nkipy.memory_stats()
    for key in (
        "active_bytes.all.peak",
        "reserved_bytes.all.peak",
        "num_alloc_retries",
        "num_ooms",
    ):
        assert key in stats  # TorchTitan's DeviceMemoryMonitor
    assert stats["allocated_bytes.all.current"] == nkipy.memory_allocated()
    assert stats["allocation.all.allocated"] >= 1 and stats["allocation.all.freed"] >= 1
    assert stats["allocated_bytes.all.freed"] >= 1024 and stats["num_ooms"] == 0
    assert list(stats) == sorted(stats)
    nkipy.empty_cache()  # nothing is cached: a no-op


def test_mem_get_info_and_properties_report_the_host_for_the_cpu_runtime():
    free, total = nkipy.mem_get_info()
    assert 0 < free <= total == nkipy.get_device_properties().total_memory


def test_an_allocation_past_the_limit_is_a_torch_out_of_memory_error():
    init_nkipy_backend(memory_limit="4MiB")
    gc.collect()
    held = nkipy.memory_allocated()
    with pytest.raises(torch.OutOfMemoryError) as raised:
        torch.empty(8 * MIB, dtype=torch.uint8, device="nkipy")
    error = raised.value
    assert isinstance(error, DeviceOutOfMemoryError) and isinstance(error, NkipyError)
    message = str(error)
    assert "tried to allocate 8.00 MiB (8388608 bytes)" in message
    assert f"of its 4.00 MiB ({4 * MIB} bytes) memory limit are free" in message
    assert "init_nkipy_backend(memory_limit=...)" in message and "resize_(0)" in message
    assert nkipy.memory_allocated() == held and nkipy.memory_stats()["num_ooms"] == 1
    assert nkipy.mem_get_info()[1] == 4 * MIB


def test_kernel_results_count_against_the_limit_and_freeing_makes_room():
    # 3 MiB of results, and room for the scalars a kernel stages (queued ops stage theirs
    # while the results of the same kernel are held)
    init_nkipy_backend(memory_limit=3 * MIB + 4096)
    x = torch.zeros(MIB // 4, device="nkipy")
    y = x + 1
    with pytest.raises(DeviceOutOfMemoryError):
        _ = [x * 2, x * 3]
    del y
    gc.collect()
    assert torch.equal((x * 2).cpu(), torch.zeros(MIB // 4))


def test_the_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv("NKIPY_MEMORY_LIMIT", "1MiB")
    config.current()  # as at the start of a program: the configuration takes the variable
    with pytest.raises(DeviceOutOfMemoryError, match="1.00 MiB"):
        torch.empty(2 * MIB, dtype=torch.uint8, device="nkipy")


def test_a_fraction_of_the_devices_memory():
    total = nkipy.get_device_properties().total_memory
    nkipy.set_per_process_memory_fraction(0.5)
    assert nkipy.get_per_process_memory_fraction() == pytest.approx(0.5)
    assert nkipy.mem_get_info()[1] == int(total * 0.5)
    nkipy.set_per_process_memory_fraction(2 * MIB / total)
    with pytest.raises(DeviceOutOfMemoryError):
        torch.empty(4 * MIB, dtype=torch.uint8, device="nkipy")


def test_a_configuration_that_keeps_the_limit_keeps_a_fraction_set_since():
    nkipy.set_per_process_memory_fraction(0.25)
    init_nkipy_backend(strict=True)  # no memory_limit: as before
    assert nkipy.get_per_process_memory_fraction() == pytest.approx(0.25)


def test_bad_limits_are_typed_errors():
    with pytest.raises(ConfigurationError, match="memory_limit must be a size in bytes"):
        init_nkipy_backend(memory_limit="lots")
    with pytest.raises(DeviceError, match=r"a number in \(0, 1\]"):
        nkipy.set_per_process_memory_fraction(1.5)


# -- storages resized in place, as FSDP2 does ----------------------------------------------------


def alloc_storage(tensor):
    """What FSDP2 does before an all-gather (``_fsdp_param.alloc_storage``)."""
    size = tensor.numel() * tensor.itemsize
    if (storage := tensor.untyped_storage()).size() != size:
        storage.resize_(size)


def free_storage(tensor):
    """What FSDP2 does after a forward or backward (``_fsdp_param.free_storage``)."""
    if (storage := tensor.untyped_storage()).size() != 0:
        storage.resize_(0)


def test_fsdp2_frees_and_brings_back_a_parameters_storage():
    gc.collect()
    base = nkipy.memory_allocated()
    unsharded = torch.empty(MIB // 4, device="nkipy")
    view = unsharded.view(512, -1)  # the unsharded parameter is a view of it
    free_storage(unsharded)
    assert nkipy.memory_allocated() == base
    assert unsharded.untyped_storage().size() == view.untyped_storage().size() == 0
    with pytest.raises(DeviceError, match="resized to 0 bytes"):
        view + 1
    alloc_storage(unsharded)
    assert nkipy.memory_allocated() == base + MIB and view.untyped_storage().size() == MIB
    # FSDP2's all-gather copy-out writes the gathered parameters into views of the storage
    gathered = torch.arange(MIB // 4, dtype=torch.float32)
    torch.split_with_sizes_copy(gathered.to("nkipy"), [MIB // 8] * 2, out=list(unsharded.chunk(2)))
    assert torch.equal(view.cpu().flatten(), gathered)


def test_resizing_keeps_the_bytes_that_fit():
    x = torch.arange(8.0, device="nkipy")
    storage = x.untyped_storage()
    storage.resize_(64)
    assert torch.equal(x.cpu(), torch.arange(8.0))
    storage.resize_(16)
    kept = torch.empty(0, device="nkipy").set_(storage).view(torch.float32)
    assert torch.equal(kept.cpu(), torch.arange(4.0))
    with pytest.raises(DeviceError, match="cannot be resized to -1 bytes"):
        storage.resize_(-1)


def test_compiled_fsdp2_resizes_through_inductors_op():
    x = torch.ones(4, device="nkipy")
    torch.ops.inductor.resize_storage_bytes_(x, 0)
    assert x.untyped_storage().size() == 0
    torch.ops.inductor.resize_storage_bytes_(x, 16)
    assert x.untyped_storage().size() == 16


def test_tensor_resize_grows_the_storage_that_its_views_share():
    x = torch.arange(4.0, device="nkipy")
    alias = x.view(2, 2)
    x.resize_(8)
    assert alias.untyped_storage().size() == 32
    assert torch.equal(x[:4].cpu(), torch.arange(4.0))
