"""Generated NumPy code writes results into buffers no value needs any more (``codegen``'s
``_buffer_reuse``): each kernel is checked against NumPy run op by op, its inputs are checked
unchanged, and its source is read for which buffers it reuses and which it must not."""

import re
import weakref

import numpy as np
import pytest
import torch
from ir_trace import trace

from nkipy_core import knp
from nkipy_core.ir import DType, TensorType, codegen
from nkipy_core.runtime.cpu import CpuRuntime

F32 = DType.f32
RNG = np.random.default_rng(0)


def run(fn, *types):
    """The kernel's source and its results, checked against ``fn`` on NumPy arrays (knp runs
    on them op by op) and with its inputs left as they were."""
    source = codegen.generate(trace(fn, *types))
    inputs = [RNG.standard_normal(t.shape).astype(t.dtype.numpy) for t in types]
    before = [a.copy() for a in inputs]
    results = codegen.load(source)(*inputs)
    expected = fn(*before)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    for a, b in zip(inputs, before):
        np.testing.assert_array_equal(a, b)
    return source, results


def reused(source: str) -> list[tuple[str, str]]:
    """(result, buffer) of every line that writes into another value's buffer."""
    return re.findall(r"(v\d+) = np\.\w+\(.*, out=(v\d+)\)", source)


def allocated_by(source: str, name: str) -> str:
    """The value whose op allocated the buffer ``name`` is in, following reuse back."""
    into = dict(reused(source))
    while name in into:
        name = into[name]
    return name


def test_a_chain_of_elementwise_ops_writes_into_one_buffer():
    source, _ = run(
        lambda x, y: knp.exp(x * 2.0 + 1.0) - y,
        TensorType((64, 32), F32),
        TensorType((64, 32), F32),
    )
    # x * 2 is the one new array; the add, the exp and the sub write into it
    assert len(reused(source)) == 3
    assert {allocated_by(source, result) for result, _ in reused(source)} == {
        re.search(r"(v\d+) = v0 \* ", source).group(1)
    }


def test_inputs_outputs_and_viewed_values_keep_their_buffers():
    def fn(x):
        a = x * 3.0  # an output: returned as computed
        b = x + 1.0  # viewed by a reshape that is read after b's last elementwise use
        c = knp.exp(b)
        return a, knp.tanh(a) + c, knp.reshape(b, (8, 8)) * 2.0

    source, (a, _, _) = run(fn, TensorType((64,), F32))
    params = {"v0"}
    a_name = re.search(r"(v\d+) = v0 \* ", source).group(1)
    b_name = re.search(r"(v\d+) = v0 \+ ", source).group(1)
    assert not {buffer for _, buffer in reused(source)} & (params | {a_name, b_name})


def test_a_product_writes_only_into_a_dead_product():
    def fn(x, w1, w2):
        h = knp.matmul(x, w1)  # [16, 16], made by np.matmul
        g = knp.tanh(x)  # [16, 16], made by a ufunc: its layout follows x's
        return knp.matmul(knp.matmul(g, w2) + 1.0, w2) + knp.matmul(h, w1)

    source, _ = run(fn, *[TensorType((16, 16), F32)] * 3)
    dots = [
        (result, buffer)
        for result, buffer in reused(source)
        if re.search(rf"{result} = np\.matmul\(", source)
    ]
    assert dots, source
    for _, buffer in dots:  # the buffer came from np.matmul, directly or through reuse
        assert re.search(rf"{allocated_by(source, buffer)} = np\.matmul\(", source), source
    for result, buffer in dots:  # and is not one of the product's own operands
        operands = re.search(rf"{result} = np\.matmul\((v\d+), (v\d+), out=", source).groups()
        assert buffer not in operands


def test_a_result_lands_in_a_buffer_freed_earlier():
    # the sum frees y's buffer; the later exp (whose operand lives on) takes it
    def fn(x):
        y = x * 2.0
        s = knp.sum(y, axis=0, keepdims=True)
        return knp.exp(x) * s, x

    source, _ = run(fn, TensorType((8, 8), F32))
    y_name = re.search(r"(v\d+) = v0 \* ", source).group(1)
    assert (re.search(r"(v\d+) = np\.exp\(v0", source).group(1), y_name) in reused(source)


@pytest.mark.parametrize("dtype", [DType.bf16, DType.f16])
def test_half_float_ops_keep_their_own_form(dtype):
    # they compute in f32 and round once per op, which ``out=`` of a half buffer would not say
    types = [TensorType((32, 32), dtype)] * 2
    source = codegen.generate(trace(lambda x, y: knp.exp(x * y) + y, *types))
    assert "out=" not in source


def test_every_call_returns_fresh_results():
    source = codegen.generate(trace(lambda x: knp.exp(x + 1.0) * 2.0, TensorType((128,), F32)))
    kernel = codegen.load(source)
    x = np.ones(128, np.float32)
    (first,) = kernel(x)
    (second,) = kernel(x)
    assert not np.shares_memory(first, second)
    np.testing.assert_allclose(first, np.exp(np.float32(2.0)) * 2.0, rtol=1e-6)


LARGE = TensorType((256, 256), F32)  # 256 KiB: over codegen.RECYCLE_MIN_BYTES


def large_kernel_executable():
    runtime = CpuRuntime()
    kernel = trace(lambda x: (knp.exp(x) * 2.0, x + 1.0), LARGE)
    return runtime, runtime.compile(kernel, None)


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_a_large_output_nothing_holds_is_written_again_on_the_next_call():
    runtime, executable = large_kernel_executable()
    assert executable.recycled == (0, 1)
    x = RNG.standard_normal(LARGE.shape).astype(np.float32)
    runtime.run_host(executable, [x])  # a first call keeps nothing
    second = runtime.run_host(executable, [x + 1])
    where = [address(a) for a in second]
    del second
    third = runtime.run_host(executable, [x + 2])
    assert [address(a) for a in third] == where
    assert (executable.reused, executable.allocated) == (2, 4)
    np.testing.assert_allclose(third[0], np.exp(x + 2) * 2.0, rtol=1e-6)
    np.testing.assert_allclose(third[1], x + 3.0, rtol=1e-6)


def test_a_kernel_called_once_holds_none_of_its_outputs():
    runtime, executable = large_kernel_executable()
    (result, _) = runtime.run_host(executable, [np.zeros(LARGE.shape, np.float32)])
    released = weakref.ref(result)
    del result
    assert released() is None  # freed when the caller dropped it, not held for a next call


def test_an_output_still_held_anywhere_is_never_written():
    runtime, executable = large_kernel_executable()
    x = RNG.standard_normal(LARGE.shape).astype(np.float32)
    held = runtime.run_host(executable, [x])[0]  # the other output is dropped
    row = held[3]  # a NumPy view
    tensor = torch.from_numpy(runtime.run_host(executable, [x])[0])  # a torch tensor
    del held
    for y in (x + 1, x + 2):
        runtime.run_host(executable, [y])
    np.testing.assert_allclose(row, np.exp(x[3]) * 2.0, rtol=1e-6)
    np.testing.assert_allclose(tensor.numpy(), np.exp(x) * 2.0, rtol=1e-6)
    assert executable.reused > 0  # the dropped second output was written again


def test_compiled_results_the_caller_keeps_stay_as_computed():
    fn = torch.compile(lambda x: torch.exp(x) * 2 + x, backend="nkipy", options={"runtime": "cpu"})
    xs = [torch.randn(256, 256) for _ in range(4)]
    kept = [fn(x) for x in xs[:2]]
    view = fn(xs[2])[:5]
    for x in xs:
        fn(x)  # results dropped: their memory is written by the next call
    for x, got in zip(xs, kept):
        torch.testing.assert_close(got, torch.exp(x) * 2 + x)
    torch.testing.assert_close(view, (torch.exp(xs[2]) * 2 + xs[2])[:5])


def test_small_outputs_are_allocated_as_numpy_does():
    source = codegen.generate(trace(lambda x: knp.exp(x) * 2.0, TensorType((64, 64), F32)))
    assert "out=out" not in source and "def kernel(v0):" in source
