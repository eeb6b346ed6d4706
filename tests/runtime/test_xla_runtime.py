"""The ``xla`` runtime: its buffer hooks against NumPy, kernels on XLA buffers without host
round trips, the HLO files in the kernel cache, and jax left as the user configured it."""

import json
import subprocess
import sys
from importlib.metadata import version

import nkipy_cli
import numpy as np
import pytest
import torch

from nkipy_core import cache_stats, init_nkipy_backend
from nkipy_core.ir import DType, KernelBuilder, TensorType
from nkipy_core.runtime.base import CompileOptions, DeviceArray
from nkipy_runtime import xla_bridge
from nkipy_runtime.hlo_files import HLO_PROTO, HLO_TEXT, STABLEHLO
from nkipy_runtime.xla_runtime import XlaRuntime

DTYPES = [
    DType.bool,
    DType.i8,
    DType.i16,
    DType.i32,
    DType.i64,
    DType.u8,
    DType.u32,
    DType.u64,
    DType.f16,
    DType.bf16,
    DType.f32,
    DType.f64,
]


def sample(dtype: DType, shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype is DType.bool:
        return rng.random(shape) < 0.5
    if dtype.is_float:
        return (rng.standard_normal(shape) * 100).astype(dtype.numpy)
    info = np.iinfo(dtype.numpy)
    return rng.integers(info.min, info.max, shape, dtype=dtype.numpy, endpoint=True)


def put(rt, host: np.ndarray, dtype: DType) -> DeviceArray:
    array = DeviceArray.contiguous(rt.allocate(host.nbytes), TensorType(host.shape, dtype))
    rt.to_device(host, array)
    return array


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_is_exact_for_every_dtype(dtype):
    rt = XlaRuntime()
    host = sample(dtype, (3, 5))
    back = rt.to_host(put(rt, host, dtype))
    assert back.dtype == host.dtype
    np.testing.assert_array_equal(back.view(np.uint8), host.view(np.uint8))  # bit for bit


def strided(array: DeviceArray, shape, strides, offset, dtype=None) -> DeviceArray:
    return DeviceArray(array.buffer, dtype or array.dtype, shape, strides, offset)


def test_strided_views_read_and_write_like_numpy():
    rt = XlaRuntime()
    host = sample(DType.f32, (4, 6))
    array = put(rt, host, DType.f32)
    # a transposed, stepped view with an offset: x[1:, ::2].T
    view = strided(array, (3, 3), (2, 6), 6)
    np.testing.assert_array_equal(rt.to_host(view), host[1:, ::2].T)
    update = sample(DType.f32, (3, 3), seed=1)
    rt.to_device(update, view)
    expected = host.copy()
    expected[1:, ::2] = update.T
    np.testing.assert_array_equal(rt.to_host(array), expected)
    # device-to-device copy into another view, without any transfer
    before = rt.stats.transfers()
    rt.copy(strided(array, (6,), (1,), 0), strided(array, (6,), (1,), 18))
    assert rt.stats.transfers() == before
    expected[3] = expected[0]
    np.testing.assert_array_equal(rt.to_host(array), expected)


def test_views_that_reinterpret_bytes_see_the_same_bits_as_numpy():
    rt = XlaRuntime()
    host = sample(DType.f32, (8,))
    array = put(rt, host, DType.f32)
    as_i32 = strided(array, (8,), (1,), 0, DType.i32)
    np.testing.assert_array_equal(rt.to_host(as_i32), host.view(np.int32))
    as_bf16 = strided(array, (16,), (1,), 0, DType.bf16)
    np.testing.assert_array_equal(rt.to_host(as_bf16).view(np.uint16), host.view(np.uint16))
    as_bytes = strided(array, (32,), (1,), 0, DType.u8)
    np.testing.assert_array_equal(rt.to_host(as_bytes), host.view(np.uint8))
    # writing one i16 half of an element changes exactly those bytes
    half = strided(array, (1,), (1,), 3, DType.i16)
    rt.to_device(np.array([-2], dtype=np.int16), half)
    expected = host.copy().view(np.int16)
    expected[3] = -2
    np.testing.assert_array_equal(rt.to_host(array).view(np.int16), expected)


def test_a_buffer_whose_size_is_not_a_multiple_of_the_element_keeps_its_tail_bytes():
    rt = XlaRuntime()
    raw = np.arange(10, dtype=np.uint8)
    buffer = put(rt, raw, DType.u8)
    rt.to_device(np.array([-1.0], dtype=np.float32), strided(buffer, (1,), (1,), 1, DType.f32))
    expected = raw.copy()
    expected[4:8] = np.array([-1.0], dtype=np.float32).view(np.uint8)
    np.testing.assert_array_equal(rt.to_host(buffer), expected)


def add_kernel(dtype: DType, shape=(2, 3)):
    b = KernelBuilder("add")
    x, y = b.param(TensorType(shape, dtype)), b.param(TensorType(shape, dtype))
    return b.finish([x + y, x])


@pytest.mark.parametrize("dtype", [DType.bf16, DType.i64, DType.u8, DType.f64], ids=str)
def test_kernels_run_on_device_buffers_and_return_device_buffers(dtype):
    rt = XlaRuntime()
    exe = rt.compile(add_kernel(dtype), CompileOptions())
    x, y = sample(dtype, (2, 3)), sample(dtype, (2, 3), seed=1)
    with np.errstate(over="ignore"):
        expected = (
            (x.astype(np.float32) + y.astype(np.float32)).astype(dtype.numpy)
            if dtype.is_half
            else x + y
        )
    before = rt.stats.transfers()
    out, same = rt.run(exe, [put(rt, x, dtype), put(rt, y, dtype)])
    assert rt.stats.host_to_device == before["host_to_device"] + 2 and rt.stats.device_to_host == 0
    np.testing.assert_array_equal(rt.to_host(out), expected)
    np.testing.assert_array_equal(rt.to_host(same), x)  # an input returned as an output


def test_kernels_read_strided_views_of_buffers():
    rt = XlaRuntime()
    exe = rt.compile(add_kernel(DType.f32, (3, 2)), CompileOptions())
    host = sample(DType.f32, (2, 3))
    array = put(rt, host, DType.f32)
    transposed = strided(array, (3, 2), (1, 3), 0)
    (out, _) = rt.run(exe, [transposed, transposed])
    np.testing.assert_array_equal(rt.to_host(out), host.T + host.T)


def test_a_buffer_read_whole_and_written_again_is_read_with_its_new_values():
    """The runtime remembers the last whole read of a buffer (a weight read by every call); a
    write, whole or strided, replaces what the next call reads."""
    rt = XlaRuntime()
    exe = rt.compile(add_kernel(DType.f32, (2, 3)), CompileOptions())
    host = sample(DType.f32, (2, 3))
    array = put(rt, host, DType.f32)
    for _ in range(2):
        (out, _) = rt.run(exe, [array, array])
        np.testing.assert_array_equal(rt.to_host(out), host + host)
    host = host + 1
    rt.to_device(host, array)
    (out, _) = rt.run(exe, [array, array])
    np.testing.assert_array_equal(rt.to_host(out), host + host)
    rt.to_device(np.zeros(2, np.float32), strided(array, (2,), (3,), 1))  # one column
    host[:, 1] = 0
    (out, _) = rt.run(exe, [array, array])
    np.testing.assert_array_equal(rt.to_host(out), host + host)


def test_compile_produces_the_hlo_artifacts_and_load_reuses_them():
    rt = XlaRuntime()
    exe = rt.compile(add_kernel(DType.f32), CompileOptions())
    files = exe.artifacts()
    assert set(files) == {STABLEHLO, HLO_PROTO, HLO_TEXT}
    assert b"stablehlo.add" in files[STABLEHLO]
    assert b"HloModule add" in files[HLO_TEXT] and b"add(" in files[HLO_TEXT]
    assert files[HLO_PROTO][:1] and files[HLO_PROTO] != files[HLO_TEXT]
    loaded = rt.load(files, exe.signature, CompileOptions())
    x = sample(DType.f32, (2, 3))
    (out, _) = rt.run(loaded, [put(rt, x, DType.f32), put(rt, x, DType.f32)])
    np.testing.assert_array_equal(rt.to_host(out), x + x)


def test_compiled_graph_on_xla_writes_hlo_into_the_cache_and_a_warm_process_does_not_lower(
    tmp_path,
):
    init_nkipy_backend(runtime="xla", nkipy_cache=tmp_path / "cache")
    f = torch.compile(lambda a, b: torch.exp(a) * b - b, backend="nkipy")
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    torch.testing.assert_close(f(a, b), torch.exp(a) * b - b)
    (entry,) = (tmp_path / "cache" / "kernels").iterdir()
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["runtime"] == "xla"
    for name in (STABLEHLO, HLO_PROTO, HLO_TEXT):
        assert (entry / "artifacts" / name).stat().st_size > 0
    assert "exponential" in (entry / "artifacts" / HLO_TEXT).read_text()
    torch._dynamo.reset()
    lowered = cache_stats["lowered_kernels"]
    torch.testing.assert_close(f(a, b), torch.exp(a) * b - b)
    assert cache_stats["lowered_kernels"] == lowered


def test_jax_64_bit_setting_is_left_as_the_user_had_it():
    import jax

    rt = XlaRuntime()
    big = np.array([2**40 + 1, -(2**62)], dtype=np.int64)
    assert rt.to_host(put(rt, big, DType.i64)).tolist() == big.tolist()
    assert not jax.config.jax_enable_x64
    assert jax.numpy.asarray(big.astype(np.int32)).dtype == np.int32


def test_kernels_run_on_the_calling_thread_and_jax_keeps_its_own_client():
    """A kernel has finished when XLA's call returns: nkipy's CPU client runs it on the calling
    thread, so no worker thread has to wake at each call. The user's jax keeps its own client."""
    import jax

    rt = XlaRuntime()
    n = 384
    t = f"tensor<{n}x{n}xf32>"
    dots = "\n".join(
        f"%{i + 1} = stablehlo.dot_general %{i}, %{i}, contracting_dims = [1] x [0] : ({t}, {t}) -> {t}"
        for i in range(6)
    )
    text = f"module @m {{ func.func public @main(%0: {t}) -> {t} {{ {dots}\n return %6 : {t} }} }}"
    executable = xla_bridge.compile_stablehlo(text, rt.device)
    (a,) = xla_bridge.Uploader(rt.device)([np.full((n, n), 1 / n, np.float32)])
    ((out,),) = executable.execute_sharded([a]).disassemble_into_single_device_arrays()
    assert out.is_ready()
    np.testing.assert_allclose(np.asarray(out), 1 / n, rtol=1e-4)  # J/n is idempotent
    assert rt.device.client is not jax.devices()[0].client


def test_without_jax_the_runtime_says_what_to_install():
    code = (
        "import sys; sys.modules['jax'] = None; sys.modules['jaxlib'] = None\n"
        "from nkipy_runtime.xla_runtime import XlaRuntime\n"
        "print(XlaRuntime().available())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert "(False, " in result.stdout and "pip install 'nkipy-runtime[xla]'" in result.stdout


def test_doctor_says_what_xla_runs_on(capsys):
    import jax
    import jaxlib

    code, out, _ = nkipy_cli.run(capsys, "doctor")
    assert code == 0
    assert nkipy_cli.line_of(out, "xla ")[:6] == [
        "xla",
        "-10",
        "nkipy-runtime",
        version("nkipy-runtime"),
        "no",
        "yes",
    ]
    assert f"Runtime 'xla': jax {jax.__version__}, jaxlib {jaxlib.__version__}, device cpu:0" in out


@pytest.mark.parametrize("device", ["cpu", "nkipy"])
def test_compiled_in_place_updates_of_inputs_match_eager(device):
    """In-place ops on graph inputs: the kernel computes the new values and the graph writes them
    back into the inputs, views included."""
    init_nkipy_backend(runtime="xla")

    def step(x, y, z):
        x.mul_(y).add_(1)
        z[1:].copy_(x[1:] * 3)
        return x.sum()

    x, y, z = torch.randn(4, 5), torch.randn(4, 5), torch.randn(4, 5)
    expected = [t.clone() for t in (x, y, z)]
    total = step(*expected)
    args = [t.to(device) for t in (x, y, z)]
    got = torch.compile(step, backend="nkipy")(*args)
    torch.testing.assert_close(got.cpu(), total)
    for arg, want in zip(args, expected):
        torch.testing.assert_close(arg.cpu(), want)


def test_run_host_converts_an_input_of_another_dtype_to_the_kernels():
    """torch's meta functions and CPU kernels disagree on a few result dtypes (bf16 batch-norm
    statistics are f32 to the meta function, bf16 from the kernel); a kernel compiled for f32 gets
    the values as f32, as staging them would give them."""
    rt = XlaRuntime()
    exe = rt.compile(add_kernel(DType.f32), CompileOptions())
    x = sample(DType.bf16, (2, 3))
    out, same = rt.run_host(exe, [x, x])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, x.astype(np.float32) * 2)
    np.testing.assert_array_equal(same, x.astype(np.float32))


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.u8], ids=str)
def test_run_host_hands_out_large_results_in_place_as_writable_memory_of_their_own(dtype):
    """A large result is the XLA buffer itself, viewed (no copy): writable, alive as long as the
    array, and not shared with the inputs, another result or the next call's results."""
    from nkipy_runtime.xla_bridge import VIEW_MIN_BYTES

    shape = (64, VIEW_MIN_BYTES // 64)  # at least VIEW_MIN_BYTES for every dtype here
    rt = XlaRuntime()
    exe = rt.compile(add_kernel(dtype, shape), CompileOptions())
    x, y = sample(dtype, shape), sample(dtype, shape, seed=1)
    total, same = rt.run_host(exe, [x, y])
    assert total.flags.writeable and same.flags.writeable and not total.flags.owndata
    for out in (total, same):
        assert not any(np.shares_memory(out, other) for other in (x, y))
    assert not np.shares_memory(total, same)
    expected = x + y
    np.testing.assert_array_equal(total, expected)
    np.testing.assert_array_equal(same, x)
    same[...] = y  # a result is the caller's to write
    again, _ = rt.run_host(exe, [x, y])
    np.testing.assert_array_equal(again, expected)
    np.testing.assert_array_equal(same, y)
    del rt, exe, again
    np.testing.assert_array_equal(total, expected)  # the buffer outlives the runtime's references


@pytest.fixture
def uploads(monkeypatch) -> list[tuple[int, ...]]:
    """The shape of every host array the xla runtime uploads, in order."""
    shapes: list[tuple[int, ...]] = []
    upload = xla_bridge.Uploader._upload

    def counted(self, host, semantics):
        shapes.append(host.shape)
        return upload(self, host, semantics)

    monkeypatch.setattr(xla_bridge.Uploader, "_upload", counted)
    return shapes


def test_a_tensor_that_comes_back_is_uploaded_once_and_read_where_it_lies(uploads):
    """A graph of CPU tensors borrows their memory; the upload of a tensor that comes back at
    every call (a parameter) is kept and reused, and reads the memory as it is then: an
    in-place update between calls is seen. Without the kept uploads each call would upload
    both tensors again."""
    w, x = torch.randn(64, 32), torch.randn(8, 64)
    f = torch.compile(lambda x, w: torch.relu(x @ w), backend="nkipy", options={"runtime": "xla"})
    for _ in range(5):
        w.mul_(-0.5)  # the same tensor, new values
        torch.testing.assert_close(f(x, w), torch.relu(x @ w))
    # the first call's views are torch's own; from the second on, the views nkipy keeps
    assert uploads.count((64, 32)) == uploads.count((8, 64)) == 2


def test_a_result_handed_out_in_place_goes_back_to_xla_as_the_array_it_is(uploads):
    """A large result is handed out as a view of its XLA buffer; a kernel that reads it next (an
    activation, one saved for the backward) gets that XLA array back, not an upload of its
    memory, and sees torch's in-place writes to it. A slice of it is uploaded as usual."""
    first = torch.compile(lambda x: torch.tanh(x) * 2, backend="nkipy", options={"runtime": "xla"})
    second = torch.compile(lambda h: h.sum(0) + 1, backend="nkipy", options={"runtime": "xla"})
    x = torch.randn(128, 256)  # 128 KiB: handed out in place
    for _ in range(3):
        h = first(x)
        h[0].add_(1.0)  # torch writes into XLA's buffer
        torch.testing.assert_close(second(h), h.sum(0) + 1)
        torch.testing.assert_close(second(h[1:]), h[1:].sum(0) + 1)
    # x twice (the first call's view is torch's own, then nkipy's kept one), h never
    assert uploads.count((128, 256)) == 2
    assert uploads.count((127, 256)) == 3
