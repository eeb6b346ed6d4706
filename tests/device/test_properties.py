"""What the ``nkipy`` device is and which one is current (``device.properties``, ``device.guard``),
through ``torch.nkipy`` and through ``torch.accelerator``."""

import pytest
import torch

from nkipy_core import DeviceError, init_nkipy_backend

nkipy = torch.nkipy


def test_name_and_properties_come_from_the_runtime():
    props = nkipy.get_device_properties()
    assert props.name == nkipy.get_device_name() == "nkipy cpu runtime (NumPy on the host)"
    assert (props.runtime, props.hardware, props.index, props.type) == ("cpu", False, 0, "nkipy")
    assert props.total_memory == nkipy.mem_get_info()[1] > 0
    assert nkipy.get_device_properties("nkipy:0") == nkipy.get_device_properties(0) == props


def test_a_device_this_process_does_not_see_is_a_typed_error():
    with pytest.raises(DeviceError, match="nkipy:3 does not exist"):
        nkipy.get_device_properties(3)


def test_device_blocks_keep_and_restore_the_current_device():
    """Device-generic torch code (activation checkpointing) runs RNG work in these blocks."""
    with nkipy.device(0):
        assert nkipy.current_device() == 0
    with nkipy.device(None), nkipy.device_of(torch.ones(1, device="nkipy")):
        assert nkipy.current_device() == 0
    with pytest.raises(DeviceError, match="does not exist"), nkipy.device(5):
        pass
    assert nkipy.current_device() == 0


def test_torch_accelerator_sees_the_device_when_asked_for():
    init_nkipy_backend(runtime="cpu")
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("nkipy")
    assert torch.accelerator.device_count() == nkipy.device_count() == 1
    torch.accelerator.set_device_index(0)
    assert torch.accelerator.current_device_index() == 0 == nkipy.current_device()
    with torch.accelerator.device_index(0):
        assert torch.accelerator.current_device_index() == 0
