"""Tensors on the nkipy device: factories, round trips across dtypes, views, printing, modules,
state dicts and torch.save, the torch.nkipy module, memory accounting and device errors."""

import io

import pytest
import torch

import nkipy_core
from nkipy_core.buffers import memory

DTYPES = [
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
]


def sample(dtype, shape=(3, 4)):
    return (torch.randn(shape) * 10).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trips_keep_values_and_dtype(dtype):
    x = sample(dtype)
    d = x.to("nkipy")
    assert d.device == torch.device("nkipy", 0) and d.dtype == dtype and d.shape == x.shape
    assert torch.equal(d.cpu(), x)
    assert torch.equal(d.to("cpu"), x)
    assert torch.equal(d.clone().cpu(), x)
    target = torch.empty(3, 4, dtype=dtype, device="nkipy")
    target.copy_(d)
    assert torch.equal(target.cpu(), x)
    assert torch.equal(x.nkipy().cpu(), x)  # generated Tensor.nkipy()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_large_copies_keep_values_and_handle_overlap(dtype):
    """Copies of 64 KiB and more take torch's copy kernel on the ``cpu`` runtime (NumPy's is ten
    times slower at some buffer distances); the runtime's overlapping copies still copy as NumPy
    does, while ``copy_`` refuses overlapping tensors as torch does."""
    x = sample(dtype, (128, 128))
    d = x.to("nkipy")
    assert torch.equal(d.cpu(), x)
    host = torch.empty(128, 128, dtype=dtype)
    host.copy_(d)
    assert torch.equal(host, x)
    strided = torch.empty(128, 256, dtype=dtype)[:, ::2]
    strided.copy_(d)
    assert torch.equal(strided, x)
    message = "refer to a single memory location"
    on_cpu = x.clone()
    with pytest.raises(RuntimeError, match=message):
        on_cpu[1:] = on_cpu[:-1]  # overlapping source and destination: torch refuses,
    with pytest.raises(RuntimeError, match=message):
        d[1:] = d[:-1]  # and so does the device
    # the runtime's own copy (kernels' write-backs) still copies overlapping buffers as NumPy
    memory.runtime().copy(memory.array(d[:-1]), memory.array(d[1:]))
    expected = x.clone()
    expected[1:] = x[:-1].clone()
    assert torch.equal(d.cpu(), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_views_share_the_buffer(dtype):
    x = sample(dtype, (4, 6))
    d = x.to("nkipy")
    assert torch.equal(d.t().cpu(), x.t())
    assert torch.equal(d[1:, ::2].cpu(), x[1:, ::2])
    assert torch.equal(d.reshape(2, 12).cpu(), x.reshape(2, 12))
    assert d[1:].untyped_storage().data_ptr() == d.untyped_storage().data_ptr()


@pytest.mark.parametrize(
    "src,dst",
    [
        (torch.float32, torch.bfloat16),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.int32),
        (torch.int64, torch.float16),
    ],
    ids=str,
)
def test_dtype_conversion_on_the_device(src, dst):
    x = sample(src)
    assert torch.equal(x.to("nkipy").to(dst).cpu(), x.to(dst))
    assert torch.equal(x.to("nkipy", dtype=dst).cpu(), x.to(dst))


def test_factories():
    torch.manual_seed(0)
    randn = torch.randn(2, 3, device="nkipy")
    assert randn.device.type == "nkipy"
    torch.manual_seed(0)
    assert torch.equal(
        torch.randn(2, 3, device="nkipy").cpu(), randn.cpu()
    )  # the device's generator
    assert torch.equal(torch.zeros(2, 3, device="nkipy").cpu(), torch.zeros(2, 3))
    assert torch.equal(
        torch.ones(4, dtype=torch.bfloat16, device="nkipy").cpu(),
        torch.ones(4, dtype=torch.bfloat16),
    )
    assert torch.equal(torch.full((2, 2), 3.5, device="nkipy").cpu(), torch.full((2, 2), 3.5))
    empty = torch.empty(5, 7, device="nkipy")
    assert empty.shape == (5, 7) and empty.device.type == "nkipy"
    assert torch.equal(torch.arange(6, device="nkipy").cpu(), torch.arange(6))


def test_writes_through_views_and_indexing():
    x = torch.zeros(3, 4)
    d = x.to("nkipy")
    d[1] = 5.0
    d[:, 2] = torch.tensor([1.0, 2.0, 3.0]).to("nkipy")
    x[1] = 5.0
    x[:, 2] = torch.tensor([1.0, 2.0, 3.0])
    assert torch.equal(d.cpu(), x)


def test_print_item_tolist():
    x = torch.tensor([[1.5, -2.0], [0.25, 4.0]])
    d = x.to("nkipy")
    text = repr(d)
    assert "device='nkipy:0'" in text
    assert text.replace(", device='nkipy:0'", "") == repr(x)
    assert d.tolist() == x.tolist()
    assert d[1, 1].item() == 4.0
    assert str(d.to(torch.bfloat16)).startswith("tensor([[ 1.5000, -2.0000]")


def test_module_to_moves_parameters_and_buffers():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.to("nkipy")
    assert {p.device.type for p in model.parameters()} == {"nkipy"}
    assert {b.device.type for b in model.buffers()} == {"nkipy"}
    assert all(isinstance(p, torch.nn.Parameter) for p in model.parameters())
    for name, value in model.state_dict().items():
        assert torch.equal(value.cpu(), state[name]), name
    model.cpu()
    assert {p.device.type for p in model.parameters()} == {"cpu"}


def test_state_dict_and_torch_save_round_trip(tmp_path):
    torch.manual_seed(0)
    source = torch.nn.Linear(5, 3).to("nkipy")
    path = tmp_path / "linear.pt"
    torch.save(source.state_dict(), path)
    loaded = torch.load(path)
    assert {v.device.type for v in loaded.values()} == {"nkipy"}
    target = torch.nn.Linear(5, 3).to("nkipy")
    target.load_state_dict(loaded)
    for (name, a), b in zip(source.state_dict().items(), target.state_dict().values()):
        assert torch.equal(a.cpu(), b.cpu()), name
    on_cpu = torch.load(path, map_location="cpu")
    assert torch.equal(on_cpu["weight"], source.weight.detach().cpu())


def test_torch_save_of_a_view_keeps_the_view():
    d = torch.arange(12.0).reshape(3, 4).to("nkipy")
    buffer = io.BytesIO()
    torch.save({"view": d[1:, 1:3], "base": d}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert torch.equal(loaded["view"].cpu(), torch.arange(12.0).reshape(3, 4)[1:, 1:3])
    assert (
        loaded["view"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    )


def test_torch_nkipy_module():
    nkipy_core.init_nkipy_backend(runtime="cpu")  # the simulator is an accelerator only when named
    assert torch.nkipy.is_available()
    assert torch.nkipy.device_count() == 1
    assert torch.nkipy.current_device() == 0
    torch.nkipy.set_device(0)
    torch.nkipy.synchronize()
    with pytest.raises(
        nkipy_core.DeviceError, match=r"nkipy:2 does not exist: this process sees 1"
    ):
        torch.nkipy.set_device(2)


def test_memory_accounting_follows_tensor_lifetimes():
    base = torch.nkipy.memory_allocated()
    torch.nkipy.reset_peak_memory_stats()
    t = torch.empty(1024, device="nkipy")
    view = t[10:]
    assert torch.nkipy.memory_allocated() == base + 4096
    del t
    assert torch.nkipy.memory_allocated() == base + 4096  # the view keeps the buffer alive
    del view
    assert torch.nkipy.memory_allocated() == base
    assert torch.nkipy.max_memory_allocated() >= base + 4096


def test_transfer_counters_count_host_traffic():
    before = torch.nkipy.transfer_stats()
    d = torch.ones(16).to("nkipy")
    d.cpu()
    after = torch.nkipy.transfer_stats()
    assert after["host_to_device"] - before["host_to_device"] == 1
    assert after["host_to_device_bytes"] - before["host_to_device_bytes"] == 64
    assert after["device_to_host"] - before["device_to_host"] == 1


def test_storage_is_a_runtime_buffer():
    d = torch.arange(4.0).to("nkipy")
    array = memory.array(d[1:])
    assert array.offset == 1 and array.shape == (3,) and array.strides == (1,)
    assert torch.equal(torch.from_numpy(memory.runtime().to_host(array)), torch.arange(1.0, 4.0))


def test_device_index_out_of_range():
    with pytest.raises(nkipy_core.DeviceError, match=r"nkipy:1 does not exist.*use 'nkipy'"):
        torch.randn(3).to("nkipy:1")
    with pytest.raises(nkipy_core.DeviceError, match="nkipy:3 does not exist"):
        torch.zeros(2, device="nkipy:3")


def test_mixing_devices_in_one_eager_op_is_an_error():
    d = torch.randn(3).to("nkipy")
    with pytest.raises(
        nkipy_core.DeviceError,
        match=r"aten::add\.Tensor got tensors on nkipy and on cpu.*Move the cpu tensor with \.to\('nkipy'\)",
    ):
        d + torch.randn(3)
    with pytest.raises(RuntimeError, match=r"aten::mm\.default got tensors on nkipy and on cpu"):
        torch.mm(d.reshape(1, 3), torch.randn(3, 1))
    # a 0-dim CPU tensor is a scalar, as torch allows for other devices
    assert torch.equal((d * torch.tensor(2.0)).cpu(), d.cpu() * 2)


def test_a_dtype_the_device_lacks_is_a_clear_error():
    with pytest.raises(
        nkipy_core.DeviceError,
        match=r"nkipy tensors cannot hold torch.float8_e4m3fn.*Keep this tensor on CPU",
    ):
        torch.zeros(3, dtype=torch.float8_e4m3fn).to("nkipy")


def test_channels_last_layouts_are_kept():
    x = torch.randn(2, 3, 4, 5)
    d = x.to("nkipy").contiguous(memory_format=torch.channels_last)
    assert d.stride() == x.contiguous(memory_format=torch.channels_last).stride()
    assert torch.equal(d.cpu(), x)
    conv = torch.nn.Conv2d(3, 4, 3).to("nkipy").to(memory_format=torch.channels_last)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
