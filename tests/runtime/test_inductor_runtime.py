"""The ``inductor`` runtime: compiled graphs whose kernels TorchInductor runs, against eager
torch; tensors passed to the kernels as they are; a model's repeated layers in one kernel;
updated inputs written where they lie; kernels torch cannot run kept on the cpu runtime; results
that are row-major memory of their own."""

import copy
import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from ir_trace import trace
from op_kernels import one_op, sample
from torch.utils._python_dispatch import TorchDispatchMode

from nkipy_core import _torch, knp
from nkipy_core.compiler.host_views import HostViews
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.ir import DType, TensorType
from nkipy_core.runtime import CompileOptions
from nkipy_core.testing.models import LlamaModel
from nkipy_runtime.inductor_runtime import InductorRuntime, Program

OPTIONS = {"runtime": "inductor", "strict": True}


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 64)
        self.down = torch.nn.Linear(64, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


def test_a_training_step_and_its_compiled_optimizer_match_eager(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nkipy.runtime.inductor")
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 8, 16)
    twin = copy.deepcopy(model)
    options = {**OPTIONS, "nkipy_cache": str(tmp_path)}
    compiled = torch.compile(twin, backend="nkipy", options=options)
    # a large eps: Adam divides by the root of tiny squared gradients, which amplifies their
    # last-bit differences between any two ways of computing them
    opt, twin_opt = (torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-3) for m in (model, twin))
    step = torch.compile(twin_opt.step, backend="nkipy", options=options)
    where = [p.data_ptr() for p in twin.parameters()]
    for _ in range(3):
        for o, f, update in ((opt, model, opt.step), (twin_opt, compiled, step)):
            o.zero_grad()
            f(x).square().mean().backward()
            update()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    assert [p.data_ptr() for p in twin.parameters()] == where
    assert "cpu runtime" not in caplog.text  # every kernel ran through TorchInductor


@pytest.mark.parametrize(("size", "kernel", "stride"), [(2, 5, 1), (9, 3, 2), (8, 5, 1)])
def test_depthwise_convolution_gradients_match_eager(size, kernel, stride, tmp_path, caplog):
    """Their weight gradients run as sums over windows (a 5x5 window over a 2x2 image, the last
    stages of EfficientNet-B0), compiled by TorchInductor."""
    caplog.set_level(logging.INFO, logger="nkipy.runtime.inductor")
    torch.manual_seed(0)
    x = torch.randn(2, 6, size, size, requires_grad=True)
    w = torch.randn(6, 1, kernel, kernel, requires_grad=True)

    def fn(x, w):
        return F.conv2d(x, w, stride=stride, padding=kernel // 2, groups=6).sin().sum()

    expected = torch.autograd.grad(fn(x, w), (x, w))
    options = {**OPTIONS, "nkipy_cache": str(tmp_path)}
    got = torch.autograd.grad(torch.compile(fn, backend="nkipy", options=options)(x, w), (x, w))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    assert "cpu runtime" not in caplog.text


@pytest.mark.parametrize(("size", "stride"), [(2, 1), (5, 2)])
def test_1x1_convolution_gradients_match_eager(size, stride, tmp_path, caplog):
    """A 1x1 convolution, its input and its weight gradients run as matrix products (the last
    ones, over a 1x1 image, are a squeeze-and-excitation block's)."""
    caplog.set_level(logging.INFO, logger="nkipy.runtime.inductor")
    torch.manual_seed(0)
    x = torch.randn(2, 12, size, size, requires_grad=True)
    w = torch.randn(20, 12, 1, 1, requires_grad=True)
    v = torch.randn(20, 20, 1, 1, requires_grad=True)

    def fn(x, w, v):
        y = F.conv2d(x, w, stride=stride)
        return (y.sin() * F.conv2d(y.mean((2, 3), keepdim=True), v)).sum()

    expected = torch.autograd.grad(fn(x, w, v), (x, w, v))
    options = {**OPTIONS, "nkipy_cache": str(tmp_path)}
    compiled = torch.compile(fn, backend="nkipy", options=options)
    got = torch.autograd.grad(compiled(x, w, v), (x, w, v))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    assert "cpu runtime" not in caplog.text


def no_numpy(monkeypatch):
    """Make every NumPy view of a kernel call's tensors, and every NumPy call of the runtime,
    an error."""

    def refuse(*args, **kwargs):
        raise AssertionError("a kernel call went through NumPy")

    monkeypatch.setattr(HostViews, "arrays", refuse)
    monkeypatch.setattr("nkipy_core.compiler.kernel_call.host_arrays", refuse)
    monkeypatch.setattr(InductorRuntime, "run_host", refuse)
    monkeypatch.setattr(InductorRuntime, "run_host_into", refuse)


def test_repeated_layers_are_one_kernel_called_with_the_graphs_tensors(
    tmp_path, graphs, monkeypatch
):
    no_numpy(monkeypatch)
    model = LlamaModel(3, seed=3)
    reference = copy.deepcopy(model)
    ids = model.example_input(seed=3)
    compiled = torch.compile(
        model, backend="nkipy", options={**OPTIONS, "nkipy_cache": str(tmp_path)}
    )
    out = compiled(ids)
    out.float().square().mean().backward()
    expected = reference(ids)
    expected.float().square().mean().backward()
    torch.testing.assert_close(out, expected, rtol=2e-5, atol=2e-5)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-5, atol=2e-5)
    # forward and backward: each one kernel, the three layers in it (dedup_layers is on)
    assert [sum(isinstance(m, KernelCall) for m in gm.children()) for gm in graphs] == [1, 1]


def run_host(kernel, inputs, runtime=None):
    runtime = runtime or InductorRuntime()
    executable = runtime.compile(kernel, CompileOptions())
    return runtime, executable, runtime.run_host(executable, inputs)


def test_a_kernel_with_a_primitive_torch_cannot_run_here_runs_on_the_cpu_runtime(caplog):
    state = np.array([1, 2, 3, 4], np.uint32)
    kernel = one_op("random_bits", [state], shape=(8,), part="bits")
    with caplog.at_level(logging.INFO, logger="nkipy.runtime.inductor"):
        runtime, executable, (bits,) = run_host(kernel, [state])
    assert executable.reason and not executable.programs
    assert "runs on the cpu runtime" in caplog.text and kernel.name in caplog.text
    (expected,) = runtime.cpu.run_host(runtime.cpu.compile(kernel, CompileOptions()), [state])
    np.testing.assert_array_equal(bits, expected)


@pytest.mark.parametrize(
    ("writes", "results", "expected"),
    [
        ((), ["r0", "r1"], ["r0", "r1"]),
        (((1, 0),), ["r0", "r1"], ["r0", "i0", "r1"]),
        (((0, 2), (2, 0)), ["r0"], ["i2", "r0", "i0"]),
        (((0, 1),), [], ["i1"]),
    ],
)
def test_a_programs_outputs_are_its_results_with_its_written_inputs_in_their_places(
    writes, results, expected
):
    """Output ``k`` of a pair ``(k, j)`` is input ``j`` itself; the results fill the others."""
    inputs = [torch.full((2,), float(j)) for j in range(3)]
    made = [torch.full((2,), 10.0 + r) for r in range(len(results))]
    program = Program(lambda *_: list(made), writes)
    names = {id(t): f"i{j}" for j, t in enumerate(inputs)}
    names.update({id(t): f"r{r}" for r, t in enumerate(made)})
    for _ in range(2):  # learnt at the first call, the same at the next
        assert [names[id(t)] for t in program(inputs)] == expected


def test_results_are_row_major_memory_of_their_own_and_strided_inputs_are_read_as_they_are():
    x = sample(DType.f32, (6, 4)).T  # a transposed view
    kernel = one_op("reshape", [x], shape=(24,))
    _, executable, (flat,) = run_host(kernel, [x])
    np.testing.assert_array_equal(flat, x.reshape(24))
    assert executable.programs and flat.flags.writeable and not np.shares_memory(flat, x)
    y = sample(DType.f32, (3, 4))
    runtime, executable, (same,) = run_host(one_op("reshape", [y], shape=(3, 4)), [y])
    assert not np.shares_memory(same, y)
    z = sample(DType.f32, (3, 4), 1)  # which results are copies is learnt at the first call
    (again,) = runtime.run_host(executable, [z])
    assert not np.shares_memory(again, z) and not np.shares_memory(again, same)
    np.testing.assert_array_equal(again, z)
    # TorchInductor gives a product of a transpose the operand's strides: returned row-major
    kernel = trace(
        lambda a: knp.multiply(knp.transpose(a, (1, 0)), 2.0), TensorType((3, 4), DType.f32)
    )
    _, _, (turned,) = run_host(kernel, [y])
    assert turned.flags.c_contiguous
    np.testing.assert_array_equal(turned, y.T * 2)
    _, _, (counts,) = run_host(one_op("iota", [], shape=(3, 4), dtype=DType.i64, axis=1), [])
    assert 0 not in counts.strides  # not a broadcast view: each position its own element
    counts[0, 0] = 7
    assert counts.tolist() == [[7, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3]]


@pytest.mark.parametrize("kind", ["max", "min", "prod"])
@pytest.mark.parametrize("start", ["an array", "a broadcast constant"])
def test_a_scatter_of_one_row_matches_the_reference(kind, start):
    """Run as the row it lands on combined and copied back (a decode step's cache update), in
    TorchInductor's loops; from a broadcast constant too, the start of an overwrite, which
    TorchInductor would copy into as if into its one element."""
    x, row = sample(DType.f32, (6, 4)), sample(DType.f32, (1, 4), 1)
    index = np.array([3], np.int64)
    if start == "an array":
        kernel = trace(
            lambda a, i, u: knp.scatter_reduce(a, i, u, kind),
            TensorType((6, 4), DType.f32),
            TensorType((1,), DType.i64),
            TensorType((1, 4), DType.f32),
        )
        inputs = [x, index, row]
    else:
        kernel = trace(
            lambda i, u: knp.scatter_reduce(knp.full((6, 4), 2.0, DType.f32), i, u, kind),
            TensorType((1,), DType.i64),
            TensorType((1, 4), DType.f32),
        )
        inputs = [index, row]
    runtime, executable, (got,) = run_host(kernel, inputs)
    assert executable.programs
    (want,) = runtime.cpu.run_host(runtime.cpu.compile(kernel, CompileOptions()), inputs)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("side", ["row", "column"])
def test_a_product_of_one_computed_row_or_column_matches_the_reference(side):
    """A decode step's attention: the one row (or column) computed in the kernel, here rotated by
    cosines of a position as a query is, is computed once into memory (``fx.rules._dot``)."""
    vec, mat = TensorType((3, 1, 8), DType.f32), TensorType((3, 8, 5), DType.f32)

    def rotated(v, p):
        return knp.multiply(v, knp.cos(knp.multiply(knp.astype(p, DType.f32), 0.5)))

    if side == "row":
        kernel = trace(lambda v, m, p: knp.matmul(rotated(v, p), m), vec, mat, I64_SCALAR)
        inputs = [sample(DType.f32, (3, 1, 8)), sample(DType.f32, (3, 8, 5), 1)]
    else:
        kernel = trace(
            lambda v, m, p: knp.matmul(m, rotated(v, p)),
            TensorType((3, 8, 1), DType.f32),
            TensorType((3, 5, 8), DType.f32),
            I64_SCALAR,
        )
        inputs = [sample(DType.f32, (3, 8, 1)), sample(DType.f32, (3, 5, 8), 1)]
    inputs.append(np.array(7, np.int64))
    runtime, executable, (got,) = run_host(kernel, inputs)
    assert executable.programs
    (want,) = runtime.cpu.run_host(runtime.cpu.compile(kernel, CompileOptions()), inputs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


I64_SCALAR = TensorType((), DType.i64)


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16], ids=str)
def test_cosines_broadcast_over_heads_match_the_reference(dtype):
    """A rotary embedding: cosines and sines of positions, broadcast over the heads, computed
    once into memory (``fx.graph.computed_once``) and read by the loop that rotates."""
    heads, angles = TensorType((2, 8, 64, 32), dtype), TensorType((2, 1, 64, 32), DType.f32)

    def rotate(x, a):
        wide = knp.astype(x, DType.f32)
        turned = knp.add(knp.multiply(wide, knp.cos(a)), knp.multiply(wide, knp.sin(a)))
        return knp.astype(turned, dtype)

    kernel = trace(rotate, heads, angles)
    inputs = [sample(dtype, heads.shape), sample(DType.f32, angles.shape, 1)]
    runtime, executable, (got,) = run_host(kernel, inputs)
    assert executable.programs
    (want,) = runtime.cpu.run_host(runtime.cpu.compile(kernel, CompileOptions()), inputs)
    np.testing.assert_allclose(
        got.astype(np.float64),
        want.astype(np.float64),
        rtol=2**-7 if dtype.is_half else 1e-5,
        atol=1e-6,
    )


class Passing(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_a_program_runs_without_gradients_on_tensors_that_require_them():
    """TorchInductor's products are ATen's ``out=`` ones, which refuse such an input while grad
    mode is on; the program runs as AOTAutograd's wrapper ran it, without gradients."""
    a, b = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8)
    runtime = InductorRuntime()
    executable = runtime.compile(
        trace(knp.matmul, TensorType((8, 8), DType.f32), TensorType((8, 8), DType.f32)),
        CompileOptions(),
    )
    (product,) = runtime.run_torch(executable, [a, b])
    assert executable.programs and torch.is_grad_enabled()
    assert not product.requires_grad
    torch.testing.assert_close(product, (a @ b).detach())


def test_a_kernel_first_called_under_a_dispatch_mode_compiles_outside_it():
    """AOTAutograd's runtime wrapper may hold a dispatch mode at a graph's first call."""
    a, b = sample(DType.f32, (4, 4)), sample(DType.f32, (4, 4), 1)
    with Passing():
        _, executable, (total,) = run_host(one_op("add", [a, b]), [a, b])
    assert executable.programs
    np.testing.assert_array_equal(total, a + b)


def test_a_kernel_torchinductor_refuses_runs_on_the_cpu_runtime_with_a_warning(monkeypatch, caplog):
    def refuse(*args, **kwargs):
        raise RuntimeError("no C++ compiler today")

    monkeypatch.setattr(_torch, "compile_fx_forward", refuse)
    a, b = sample(DType.f32, (4, 4)), sample(DType.f32, (4, 4), 1)
    with caplog.at_level(logging.WARNING, logger="nkipy.runtime.inductor"):
        runtime, executable, (total,) = run_host(one_op("mul", [a, b]), [a, b])
        (again,) = runtime.run_host(executable, [a, b])
    np.testing.assert_array_equal(total, a * b)
    np.testing.assert_array_equal(again, a * b)
    assert executable.reason == "TorchInductor: RuntimeError: no C++ compiler today"
    assert caplog.text.count("no C++ compiler today") == 1  # said once, not at every call
