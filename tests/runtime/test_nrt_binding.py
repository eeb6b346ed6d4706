"""The NRT binding against a STAND-IN libnrt, not the Neuron Runtime.

``nrt_standin/libnrt_standin.c`` is compiled here with gcc. It implements the public libnrt
signatures on host memory, records its calls, fails on demand and "executes" a text NEFF format of
its own. These tests therefore prove the ctypes marshalling (types, sizes, offsets, names,
pointers, the tensor-info layout as the header declares it), the status-to-error mapping, the
process lifetime and the buffer hooks' byte movement. They prove nothing about real hardware,
real NEFFs or the real libnrt's behaviour: docs/runtimes.md lists what only hardware verifies.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import tomllib
from importlib import metadata
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from fresh_python import python
from nrt_standin_neff import NRT_DTYPE, neff

import nkipy_core
from nkipy_core.errors import DeviceError
from nkipy_core.ir.types import DType, TensorType
from nkipy_core.runtime.base import DeviceArray
from nkipy_runtime.nrt import cores, layout, library, locate, probe
from nkipy_runtime.nrt.device import MAX_COPY_RUNS, NeffBindingError, NrtDevice
from nkipy_runtime.nrt.library import LibnrtNotFoundError, NrtLibrary, TensorInfo
from nkipy_runtime.nrt.status import NrtError

REPO = Path(__file__).parents[2]


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def standin(standin_path):
    """The stand-in's own inspection functions (same dlopen handle, so same state, as the binding's)."""
    lib = ctypes.CDLL(standin_path)
    lib.standin_calls.argtypes = [ctypes.c_char_p]
    lib.standin_fail_next.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.standin_last_call.restype = ctypes.c_char_p
    lib.standin_last_int.restype = ctypes.c_longlong
    lib.standin_last_str.restype = ctypes.c_char_p
    lib.standin_live_tensors.restype = ctypes.c_longlong

    class Standin:
        def calls(self, name: str) -> int:
            return lib.standin_calls(name.encode())

        def last(self) -> tuple[str, list[int], list[str]]:
            return (
                lib.standin_last_call().decode(),
                [lib.standin_last_int(i) for i in range(3)],
                [lib.standin_last_str(i).decode() for i in range(2)],
            )

        def fail_next(self, call: str, status: int) -> None:
            lib.standin_fail_next(call.encode(), status)

        def live(self) -> int:
            return lib.standin_live_tensors()

    return Standin()


@pytest.fixture(scope="session")
def nrt(standin_path) -> NrtLibrary:
    """The process's binding of the stand-in, initialised without leaking the core choice it sets."""
    lib = NrtLibrary.open(standin_path)
    saved = os.environ.get(cores.VISIBLE_CORES)
    lib.init()
    if saved is None:
        del os.environ[cores.VISIBLE_CORES]
    else:
        os.environ[cores.VISIBLE_CORES] = saved
    return lib


@pytest.fixture
def device(nrt) -> NrtDevice:
    dev = NrtDevice(nrt, core=1)
    yield dev
    dev.unload_all()


def host(dtype: DType, shape, seed=0) -> np.ndarray:
    values = np.random.default_rng(seed).normal(size=shape) * 50
    return values.astype(ml_dtypes.bfloat16 if dtype is DType.bf16 else dtype.numpy)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# ------------------------------------------------------------------------------- library


def test_find_library_prefers_env_then_sdk_path_then_linker(monkeypatch, tmp_path):
    sdk = tmp_path / "libnrt.so.1"
    monkeypatch.setattr(locate.ctypes.util, "find_library", lambda name: f"linker-{name}")
    monkeypatch.setattr(locate, "STANDARD_LOCATIONS", (str(sdk),))
    monkeypatch.delenv(locate.LIBRARY_ENV, raising=False)
    locate.linker_library.cache_clear()
    assert locate.find_library() == "linker-nrt"
    locate.linker_library.cache_clear()
    sdk.write_bytes(b"")
    assert locate.find_library() == str(sdk)
    monkeypatch.setenv(locate.LIBRARY_ENV, "/somewhere/libnrt.so")
    assert locate.find_library() == "/somewhere/libnrt.so"


def test_missing_or_broken_library_is_a_typed_error_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(library, "find_library", lambda: None)
    with pytest.raises(LibnrtNotFoundError, match="aws-neuronx-runtime-lib.*NKIPY_LIBNRT"):
        NrtLibrary.open()
    broken = tmp_path / "libnrt.so"
    broken.write_text("not a shared object")
    with pytest.raises(
        LibnrtNotFoundError, match=f"cannot load libnrt from '{broken}'.*NKIPY_LIBNRT"
    ):
        NrtLibrary(str(broken))


def test_open_gives_one_library_per_process(nrt, standin, standin_path):
    inits = standin.calls("nrt_init")
    assert inits >= 1  # the session fixture's
    assert NrtLibrary.open(standin_path) is nrt
    nrt.init()
    assert standin.calls("nrt_init") == inits


INIT_SCRIPT = """
import ctypes, sys
from nkipy_runtime.nrt.library import NrtLibrary
lib = NrtLibrary.open()
lib.init()
lib.init()
spy = ctypes.CDLL(lib.path)
spy.standin_last_call.restype = spy.standin_last_str.restype = ctypes.c_char_p
print(spy.standin_last_call().decode(), spy.standin_last_int(0), spy.standin_last_str(0).decode(),
      spy.standin_last_str(1).decode(), sep="|")
"""


@pytest.mark.parametrize(
    "env, visible",
    [
        ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "NRT_STANDIN_CORES": "4"}, "2-3"),
        ({"NEURON_RT_VISIBLE_CORES": "5,7"}, "5,7"),
        ({"NEURON_RT_VISIBLE_CORES": "4-7", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, "6-7"),
        ({"NRT_STANDIN_CORES": "3"}, "0-2"),
    ],
)
def test_init_once_with_rank_cores_and_close_at_exit(standin_path, tmp_path, env, visible):
    """A fresh process: nrt_init sees this rank's NEURON_RT_VISIBLE_CORES, runs once, and
    nrt_close runs at interpreter exit (the stand-in appends both to a log file)."""
    log = tmp_path / "calls.log"
    clean = {"NEURON_RT_VISIBLE_CORES": None, "LOCAL_RANK": None, "LOCAL_WORLD_SIZE": None}
    done = python(
        INIT_SCRIPT, NKIPY_LIBNRT=standin_path, NRT_STANDIN_LOG=str(log), **{**clean, **env}
    )
    assert done.returncode == 0, done.stderr
    call, framework, fw_version, fal_version = done.stdout.strip().split("|")
    assert (call, int(framework)) == ("nrt_init", library.FRAMEWORK_TYPE_NO_FW)
    assert fw_version == fal_version == metadata.version("nkipy-runtime")
    assert log.read_text().splitlines() == [f"nrt_init {visible}", "nrt_close "]


def test_status_codes_become_typed_errors_with_their_names(nrt, standin):
    for status, name in [
        (9, "NRT_LOAD_NOT_ENOUGH_NC"),
        (10, "NRT_UNSUPPORTED_NEFF_VERSION"),
        (777, "NRT_UNKNOWN"),
    ]:
        standin.fail_next("nrt_load", status)
        image = neff("copy")
        with pytest.raises(NrtError) as info:
            nrt.load(image, 0)
        assert (info.value.call, info.value.status, info.value.name) == ("nrt_load", status, name)
        assert str(info.value).startswith(
            f"nrt_load failed ({len(image)}-byte NEFF on core 0): {name} ({status}): "
        )
    assert isinstance(info.value, RuntimeError)
    assert "NEURON_RT_VISIBLE_CORES" in str(NrtError("nrt_load", 9))


@pytest.mark.parametrize(
    "call, status, name",
    [
        ("nrt_tensor_allocate", 4, "NRT_RESOURCE"),
        ("nrt_tensor_write", 2, "NRT_INVALID"),
        ("nrt_tensor_read", 6, "NRT_HW_ERROR"),
        ("nrt_tensor_copy", 2, "NRT_INVALID"),
        ("nrt_tensor_allocate_slice", 4, "NRT_RESOURCE"),
        ("nrt_get_model_tensor_info", 1, "NRT_FAILURE"),
        ("nrt_allocate_tensor_set", 4, "NRT_RESOURCE"),
        ("nrt_add_tensor_to_tensor_set", 2, "NRT_INVALID"),
        ("nrt_execute", 1002, "NRT_EXEC_BAD_INPUT"),
        ("nrt_unload", 3, "NRT_INVALID_HANDLE"),
        ("nrt_free_model_tensor_info", 1, "NRT_FAILURE"),
    ],
)
def test_every_call_checks_its_status(nrt, standin, call, status, name):
    tensor = nrt.allocate(16, 0, "t")
    model = nrt.load(
        neff("copy", ("input", "a", DType.f32, (4,)), ("output", "b", DType.f32, (4,))), 0
    )
    buf = np.zeros(4, np.float32)
    actions = {
        "nrt_tensor_allocate": lambda: nrt.allocate(8, 0, "x"),
        "nrt_tensor_write": lambda: nrt.write(tensor, buf, 0),
        "nrt_tensor_read": lambda: nrt.read(tensor, buf, 0),
        "nrt_tensor_copy": lambda: nrt.copy(tensor, 0, tensor, 8, 8),
        "nrt_tensor_allocate_slice": lambda: nrt.allocate_slice(tensor, 4, 8, "s"),
        "nrt_get_model_tensor_info": lambda: nrt.tensor_info(model),
        "nrt_allocate_tensor_set": lambda: nrt.execute(model, {"a": tensor}, {"b": tensor}),
        "nrt_add_tensor_to_tensor_set": lambda: nrt.execute(model, {"a": tensor}, {"b": tensor}),
        "nrt_execute": lambda: nrt.execute(model, {"a": tensor}, {"b": tensor}),
        "nrt_unload": lambda: nrt.unload(model),
        "nrt_free_model_tensor_info": lambda: nrt.tensor_info(model),
    }
    sets_destroyed = standin.calls("nrt_destroy_tensor_set")
    standin.fail_next(call, status)
    with pytest.raises(NrtError, match=f"^{call} failed.*: {name} \\({status}\\): ") as info:
        actions[call]()
    assert info.value.name == name
    if call in (
        "nrt_execute",
        "nrt_add_tensor_to_tensor_set",
    ):  # a set made is destroyed all the same
        assert standin.calls("nrt_destroy_tensor_set") == sets_destroyed + (
            2 if call == "nrt_execute" else 1
        )
    nrt.unload(model)
    nrt.free(tensor)


def test_a_failed_init_is_a_typed_error(nrt, standin, standin_path, monkeypatch):
    monkeypatch.setenv(cores.VISIBLE_CORES, "0")
    fresh = NrtLibrary(standin_path)  # not the process's library: its init would be the second
    for call, status, name in [
        ("nrt_get_total_nc_count", 1, "NRT_FAILURE"),
        ("nrt_init", 4, "NRT_RESOURCE"),
    ]:
        standin.fail_next(call, status)
        with pytest.raises(NrtError, match=f"^{call} failed: {name} \\({status}\\)"):
            fresh.init()
    assert standin.calls("nrt_init") == 2  # the session's and the failed one


def test_out_of_bounds_transfer_is_refused(nrt):
    tensor = nrt.allocate(8, 0, "small")
    with pytest.raises(
        NrtError, match="nrt_tensor_write failed \\(16 bytes at offset 4\\): NRT_INVALID"
    ):
        nrt.write(tensor, np.zeros(4, np.float32), 4)
    nrt.free(tensor)


# ------------------------------------------------------------------------------- marshalling


def test_tensor_calls_pass_sizes_offsets_names_and_pointers(nrt, standin):
    live = standin.live()
    tensor = nrt.allocate(40, 1, "weights")
    assert standin.last() == (
        "nrt_tensor_allocate",
        [library.PLACEMENT_DEVICE, 1, 40],
        ["weights", ""],
    )
    data = np.arange(6, dtype=np.int32)
    nrt.write(tensor, data, 12)
    assert standin.last()[:2] == ("nrt_tensor_write", [12, data.nbytes, 0])
    back = np.full(10, -1, np.int32)
    nrt.read(tensor, back, 0)
    assert standin.last()[:2] == ("nrt_tensor_read", [0, 40, 0])
    expected = np.zeros(10, np.int32)  # the stand-in zero-fills a new tensor
    expected[3:9] = data
    assert same_bits(back, expected)
    nrt.copy(tensor, 12, tensor, 0, 8)
    assert standin.last()[:2] == ("nrt_tensor_copy", [12, 0, 8])
    part = nrt.allocate_slice(tensor, 16, 8, "part")
    assert standin.last() == ("nrt_tensor_allocate_slice", [16, 8, 0], ["part", ""])
    sliced = np.empty(2, np.int32)
    nrt.read(part, sliced, 0)
    assert same_bits(sliced, data[1:3])
    assert standin.live() == live + 2
    nrt.free(part)
    nrt.free(tensor)
    assert standin.live() == live


def test_host_arrays_must_be_contiguous(nrt):
    tensor = nrt.allocate(16, 0, "t")
    with pytest.raises(ValueError, match="C-contiguous"):
        nrt.write(tensor, np.zeros(8, np.float32)[::2], 0)
    nrt.free(tensor)


def test_load_and_tensor_info_marshalling(nrt, standin):
    image = neff(
        "copy",
        ("input", "in_a", DType.bf16, (2, 3, 4)),
        ("input", "in_b", DType.i64, (5,)),
        ("output", "out_a", DType.bf16, (2, 3, 4)),
        ("output", "out_b", DType.i64, (5,)),
    )
    model = nrt.load(image, 1)
    assert standin.last()[:2] == ("nrt_load", [len(image), 1, -1])
    infos = nrt.tensor_info(model)
    assert standin.last()[0] == "nrt_free_model_tensor_info"
    assert infos == [
        TensorInfo("in_a", library.USAGE_INPUT, 2 * 3 * 4 * 2, NRT_DTYPE[DType.bf16], (2, 3, 4)),
        TensorInfo("in_b", library.USAGE_INPUT, 5 * 8, NRT_DTYPE[DType.i64], (5,)),
        TensorInfo("out_a", library.USAGE_OUTPUT, 2 * 3 * 4 * 2, NRT_DTYPE[DType.bf16], (2, 3, 4)),
        TensorInfo("out_b", library.USAGE_OUTPUT, 5 * 8, NRT_DTYPE[DType.i64], (5,)),
    ]
    nrt.unload(model)


# ------------------------------------------------------------------------------- visible cores


@pytest.mark.parametrize(
    "text, expected",
    [("2", (2,)), ("0-3", tuple(range(4))), ("4,5,7", (4, 5, 7)), ("0-1, 6", (0, 1, 6))],
)
def test_parse_visible_cores(text, expected):
    assert cores.parse_visible_cores(text) == expected
    assert cores.parse_visible_cores(cores.format_visible_cores(expected)) == expected


@pytest.mark.parametrize(
    "text, message", [("a", "not a core list"), ("3-1", "empty or negative"), ("1,1", "twice")]
)
def test_malformed_visible_cores_say_how_to_write_them(text, message):
    with pytest.raises(cores.CoreMappingError, match=message):
        cores.parse_visible_cores(text)


def test_local_ranks_share_the_cores_in_equal_blocks():
    visible = tuple(range(8, 16))
    shares = [cores.cores_for_local_rank(visible, rank, 4) for rank in range(4)]
    assert sum(shares, ()) == visible and {len(s) for s in shares} == {2}


def test_fewer_cores_than_local_ranks_is_a_clear_error():
    with pytest.raises(
        cores.CoreMappingError, match="4 local ranks but only 2 visible NeuronCore.*nproc-per-node"
    ):
        cores.assign_visible_cores(2, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"})
    with pytest.raises(cores.CoreMappingError, match="LOCAL_RANK=2 is outside LOCAL_WORLD_SIZE=2"):
        cores.assign_visible_cores(8, {"LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"})


def test_a_single_process_keeps_the_users_setting():
    assert cores.assign_visible_cores(8, {cores.VISIBLE_CORES: "3"}) is None
    with pytest.raises(cores.CoreMappingError):
        cores.assign_visible_cores(8, {cores.VISIBLE_CORES: "three"})


# ------------------------------------------------------------------------------- the device


DTYPES = [DType.f32, DType.bf16, DType.f16, DType.i64, DType.u8]


@pytest.mark.parametrize("dtype", DTYPES)
def test_buffer_hooks_round_trip_and_count(device, standin, dtype):
    live = standin.live()
    values = host(dtype, (3, 5))
    array = DeviceArray.contiguous(device.allocate(values.nbytes), TensorType(values.shape, dtype))
    assert device.stats.allocated == values.nbytes
    device.to_device(values, array)
    assert standin.last()[:2] == ("nrt_tensor_write", [0, values.nbytes, 0])
    assert same_bits(device.to_host(array), values)
    assert device.stats.transfers() == {
        "host_to_device": 1,
        "host_to_device_bytes": values.nbytes,
        "device_to_host": 1,
        "device_to_host_bytes": values.nbytes,
    }
    device.free(array.buffer)
    assert device.stats.allocated == 0 and standin.live() == live


def strided_views(buffer, dtype) -> dict[str, tuple[DeviceArray, tuple]]:
    """Views of a (4, 6) buffer, with the NumPy index that gives the same view of a host array."""
    return {
        "row slice": (DeviceArray(buffer, dtype, (2, 6), (6, 1), 6), np.s_[1:3, :]),
        "column slice": (DeviceArray(buffer, dtype, (4, 3), (6, 1), 2), np.s_[:, 2:5]),
        "every other column": (DeviceArray(buffer, dtype, (4, 3), (6, 2), 1), np.s_[:, 1::2]),
    }


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.i64])
@pytest.mark.parametrize("view", ["row slice", "column slice", "every other column", "transpose"])
def test_views_write_and_read_exactly_their_elements(device, dtype, view):
    whole_type = TensorType((4, 6), dtype)
    buffer = device.allocate(4 * 6 * dtype.numpy.itemsize)
    whole = DeviceArray.contiguous(buffer, whole_type)
    reference = host(dtype, (4, 6), seed=1)
    device.to_device(reference, whole)
    if view == "transpose":
        array, ref_view = DeviceArray(buffer, dtype, (6, 4), (1, 6)), reference.T
    else:
        array, index = strided_views(buffer, dtype)[view]
        ref_view = reference[index]
    assert same_bits(device.to_host(array), np.ascontiguousarray(ref_view))
    update = host(dtype, array.shape, seed=2)
    device.to_device(update, array)
    ref_view[...] = update
    assert same_bits(device.to_host(whole), reference)
    device.free(buffer)


def test_to_device_rejects_a_mismatched_host_array(device):
    array = DeviceArray.contiguous(device.allocate(24), TensorType((2, 3), DType.f32))
    with pytest.raises(DeviceError, match="convert it first"):
        device.to_device(np.zeros((2, 3), np.float64), array)
    device.free(array.buffer)


@pytest.mark.parametrize(
    "shape, src_strides, dst_strides, device_copies",
    [
        ((4, 6), (6, 1), (6, 1), 1),  # contiguous: one nrt_tensor_copy
        ((4, 3), (6, 2), (3, 1), 12),  # every other column: one per element
        ((32, 32), (1, 32), (32, 1), 0),  # a transpose: 1024 runs > MAX_COPY_RUNS, so via the host
    ],
)
def test_copy_between_views(device, standin, shape, src_strides, dst_strides, device_copies):
    dtype = DType.f32
    n = int(np.prod(shape))
    source_values = host(dtype, (4 * n,), seed=3)  # room for every view below
    src_buffer, dst_buffer = (
        device.allocate(source_values.nbytes),
        device.allocate(source_values.nbytes),
    )
    device.to_device(
        source_values, DeviceArray.contiguous(src_buffer, TensorType(source_values.shape, dtype))
    )
    src = DeviceArray(src_buffer, dtype, shape, src_strides, 2)
    dst = DeviceArray(dst_buffer, dtype, shape, dst_strides, 0)
    copies, transfers = standin.calls("nrt_tensor_copy"), device.stats.transfers()
    device.copy(src, dst)
    assert standin.calls("nrt_tensor_copy") - copies == device_copies
    via_host = int(device_copies == 0)
    assert (layout.common_runs(src, dst).count > MAX_COPY_RUNS) == bool(via_host)
    assert device.stats.host_to_device - transfers["host_to_device"] == via_host
    assert device.stats.device_to_host - transfers["device_to_host"] == via_host
    step = source_values.itemsize
    reference = np.lib.stride_tricks.as_strided(
        source_values[2:], shape, tuple(st * step for st in src_strides)
    )
    assert same_bits(device.to_host(dst), np.ascontiguousarray(reference))
    device.free(src_buffer)
    device.free(dst_buffer)


def test_run_binds_whole_sliced_and_strided_inputs(device, standin):
    """Three inputs of the stand-in's f32 "add" NEFF: a whole buffer, a contiguous view (bound as
    an NRT slice) and a strided view (staged into a new tensor on the device)."""
    f32 = DType.f32
    image = neff(
        "add",
        ("input", "a", f32, (2, 3)),
        ("input", "b", f32, (2, 3)),
        ("input", "c", f32, (2, 3)),
        ("output", "sum", f32, (2, 3)),
    )
    a, big = host(f32, (2, 3), seed=4), host(f32, (4, 6), seed=5)
    a_dev = DeviceArray.contiguous(device.allocate(a.nbytes), TensorType((2, 3), f32))
    big_buffer = device.allocate(big.nbytes)
    device.to_device(a, a_dev)
    device.to_device(big, DeviceArray.contiguous(big_buffer, TensorType((4, 6), f32)))
    b_dev = DeviceArray(big_buffer, f32, (2, 3), (3, 1), 12)  # contiguous, at an offset
    c_dev = DeviceArray(big_buffer, f32, (2, 3), (6, 2), 1)  # strided
    b_ref, c_ref = big.reshape(-1)[12:18].reshape(2, 3), big[:2, 1::2]
    live, loads, transfers = standin.live(), standin.calls("nrt_load"), device.stats.transfers()
    for _ in range(2):
        (out,) = device.run(image, [a_dev, b_dev, c_dev], [TensorType((2, 3), f32)])
        assert device.stats.transfers() == transfers  # running moves nothing through the host
        assert standin.live() == live + 1  # the output; slice and staging tensors are freed
        result = device.to_host(out)
        transfers = device.stats.transfers()
        np.testing.assert_array_equal(result, a + b_ref + c_ref)
        device.free(out.buffer)
    assert standin.calls("nrt_load") == loads + 1  # loaded once per NEFF content
    device.unload_all()
    device.free(a_dev.buffer)
    device.free(big_buffer)


@pytest.mark.parametrize("dtypes", [(DType.bf16, DType.i32), (DType.u8, DType.f16, DType.i64)])
def test_run_binds_inputs_and_outputs_in_the_neffs_order(device, standin, dtypes):
    """The stand-in's "copy" NEFF sends input i to output i: each output holds its own input's bits."""
    shapes = [(3, i + 1) for i in range(len(dtypes))]
    tensors = [("input", f"x{i}", dt, s) for i, (dt, s) in enumerate(zip(dtypes, shapes))]
    tensors += [("output", f"y{i}", dt, s) for i, (dt, s) in enumerate(zip(dtypes, shapes))]
    types = [TensorType(s, dt) for dt, s in zip(dtypes, shapes)]
    values = [host(t.dtype, t.shape, seed=i) for i, t in enumerate(types)]
    inputs = [DeviceArray.contiguous(device.allocate(v.nbytes), t) for v, t in zip(values, types)]
    for v, a in zip(values, inputs):
        device.to_device(v, a)
    unloads = standin.calls("nrt_unload")
    outputs = device.run(neff("copy", *tensors), inputs, types)
    for v, o in zip(values, outputs):
        assert same_bits(device.to_host(o), v)
    for array in [*inputs, *outputs]:
        device.free(array.buffer)
    device.unload_all()
    assert standin.calls("nrt_unload") == unloads + 1


def test_run_refuses_a_neff_that_does_not_match(device, standin):
    f32 = DType.f32
    image = neff("add", ("input", "a", f32, (4,)), ("output", "s", f32, (4,)))
    a = DeviceArray.contiguous(device.allocate(16), TensorType((4,), f32))
    with pytest.raises(NeffBindingError, match=r"1 input\(s\) \[a \(16 B\)\] but was given 2"):
        device.run(image, [a, a], [TensorType((4,), f32)])
    live = standin.live()
    with pytest.raises(
        NeffBindingError, match=r"output\(s\) \[s \(16 B\)\] but was given 1 of \[32\]"
    ):
        device.run(image, [a], [TensorType((8,), f32)])
    standin.fail_next("nrt_execute", 1002)
    with pytest.raises(NrtError, match="NRT_EXEC_BAD_INPUT"):
        device.run(image, [a], [TensorType((4,), f32)])
    assert (
        standin.live() == live and device.stats.allocated == 16
    )  # the failed run freed its output
    device.free(a.buffer)


# ------------------------------------------------------------------------------- probe


@pytest.fixture
def bare_machine(monkeypatch, tmp_path):
    """No neuronx-cc on PATH, no libnrt anywhere, an empty /dev."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "dev").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv(locate.LIBRARY_ENV, raising=False)
    monkeypatch.setattr(locate, "STANDARD_LOCATIONS", ())
    monkeypatch.setattr(locate.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(probe, "DEVICE_DIR", str(tmp_path / "dev"))
    probe.hardware_present.cache_clear()
    locate.linker_library.cache_clear()
    yield tmp_path
    probe.hardware_present.cache_clear()
    locate.linker_library.cache_clear()


def test_missing_names_each_piece_and_how_to_get_it(bare_machine, monkeypatch, standin_path):
    compiler, lib, devices = probe.missing()
    assert compiler.startswith("neuronx-cc is not on PATH") and "pip install neuronx-cc" in compiler
    assert (
        lib.startswith("libnrt.so was not found")
        and "aws-neuronx-runtime-lib" in lib
        and "NKIPY_LIBNRT" in lib
    )
    assert (
        devices.startswith(f"no Neuron devices ({bare_machine / 'dev'}/neuron*)")
        and "aws-neuronx-dkms" in devices
    )
    assert not probe.hardware_present()

    cc = bare_machine / "bin" / "neuronx-cc"
    cc.write_text("#!/bin/sh\n")
    cc.chmod(0o755)
    monkeypatch.setenv(locate.LIBRARY_ENV, standin_path)
    (bare_machine / "dev" / "neuron0").write_text("")
    assert probe.missing() == []
    assert probe.neuron_devices() == [str(bare_machine / "dev" / "neuron0")]
    probe.hardware_present.cache_clear()
    assert probe.hardware_present()


def test_on_a_neuron_host_import_torch_registers_the_device(monkeypatch):
    """nkipy-runtime's own ``torch.backends`` entry point: the hardware is the opt-in."""
    from nkipy_runtime import autoload

    project = tomllib.loads((REPO / "nkipy_runtime" / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["torch.backends"] == {
        "nkipy_runtime": "nkipy_runtime.autoload:autoload"
    }
    registered = []
    monkeypatch.setattr(nkipy_core, "register_device", lambda: registered.append(True))
    monkeypatch.setattr(probe, "hardware_present", lambda: False)
    autoload.autoload()
    assert registered == []
    monkeypatch.setattr(probe, "hardware_present", lambda: True)
    autoload.autoload()
    assert registered == [True]


def test_hardware_probe_is_registered_for_the_core():
    project = tomllib.loads((REPO / "nkipy_runtime" / "pyproject.toml").read_text())
    target = project["project"]["entry-points"]["nkipy.hardware"]["neuron"]
    module, _, name = target.partition(":")
    assert getattr(importlib.import_module(module), name) is probe.hardware_present


def test_the_hardware_probe_imports_nothing_but_itself():
    """torch reaches the probe inside every ``import torch`` (nkipy-runtime's autoload) and in
    every program dynamo compiles; it must not load the binding, the compiler driver, jax or the
    rest of nkipy-runtime."""
    loaded = python(
        "import sys, torch\n"
        "print(sorted(m for m in sys.modules if m.startswith(('nkipy_runtime', 'jax'))))\n",
        NKIPY_RUNTIME=None,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == (
        "['nkipy_runtime', 'nkipy_runtime.autoload', 'nkipy_runtime.nrt', "
        "'nkipy_runtime.nrt.locate', 'nkipy_runtime.nrt.probe']"
    )
