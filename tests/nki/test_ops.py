"""NKI kernels as torch ops: both registration spellings, eager and compiled, launch grids, the
one-step ``nki_op`` with autograd, and what declines (with the reason) instead of miscomputing."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from nki_tutorial import tensor_add_kernel, tiled_add_kernel

import nkipy_core
import nkipy_ops_nki.nki.language as nl
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.plugin import manager as plugins
from nkipy_ops_nki import NKIOpRegistry, nki, nki_op

add_kernel = NKIOpRegistry.register("nkitest::add")(tensor_add_kernel)


@torch.library.custom_op("nkitest::add", mutates_args=())
def nki_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return add_kernel(a, b)


nki_add.register_fake(lambda a, b: torch.empty_like(a))


tiled_kernel = NKIOpRegistry.register("nkitest::tiled_add")(tiled_add_kernel)


@torch.library.custom_op("nkitest::tiled_add", mutates_args=())
def tiled_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = torch.zeros_like(a)
    tiled_kernel[a.shape[0] // 128, a.shape[1] // 512](a, b, c)
    return c


tiled_add.register_fake(lambda a, b: torch.empty_like(a))

NKIOpRegistry.register("nkitest::tiled_add_nc2")(tiled_kernel)


@torch.library.custom_op("nkitest::tiled_add_nc2", mutates_args=())
def tiled_add_nc2(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = torch.zeros_like(a)
    tiled_kernel[nl.spmd_dim(a.shape[0] // 256, nl.nc(2)), a.shape[1] // 512](a, b, c)
    return c


tiled_add_nc2.register_fake(lambda a, b: torch.empty_like(a))


@NKIOpRegistry.register("nkitest::add_then_double")
def add_for_double(a_input, b_input):
    return add_kernel.fn(a_input, b_input)


@torch.library.custom_op("nkitest::add_then_double", mutates_args=())
def add_then_double(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return add_for_double(a, b) * 2  # work around the kernel: not lowerable as one custom call


add_then_double.register_fake(lambda a, b: torch.empty_like(a))


def _scale_backward(ctx, grad):
    return grad * ctx.alpha, None


def _scale_setup(ctx, inputs, output):
    ctx.alpha = inputs[1]


@nki_op("nkitest::scale", backward=_scale_backward, setup_context=_scale_setup)
def scale_kernel(x, alpha=1.0):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(x.shape[0])[:, None]
    iy = nl.arange(x.shape[1])[None, :]
    nl.store(out[ix, iy], value=nl.multiply(nl.load(x[ix, iy]), alpha))
    return out


def _compile(fn, graphs):
    """Compile ``fn``; returns a caller that also gives the FallbackWarnings it raised."""
    compiled = torch.compile(fn, backend="nkipy", fullgraph=True, options={"runtime": "cpu"})

    def call(*args):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = compiled(*args)
        return out, [
            str(w.message) for w in caught if issubclass(w.category, nkipy_core.FallbackWarning)
        ]

    return call


def _kernel_calls(graph) -> int:
    return sum(isinstance(m, KernelCall) for m in graph.children())


def _kernel_sources() -> str:
    return "".join(p.read_text() for p in Path.cwd().glob("nkipy_cache/kernels/*/kernel.py"))


def _configs(sources: str) -> list[dict]:
    """The configs of the NKI custom calls in generated kernel files."""
    prefix = "_custom_call('nkipy_ops_nki.custom_call:run', "
    found = []
    for line in sources.splitlines():
        if prefix in line:
            literal = line.split(prefix, 1)[1]
            found.append(json.loads(eval(literal[: literal.index("', (") + 1])))  # noqa: S307 - our own file
    return found


def test_the_kernel_runs_eagerly_through_the_op_on_cpu_and_on_the_nkipy_device():
    a, b = torch.randn(128, 512), torch.randn(128, 512)
    torch.testing.assert_close(nki_add(a, b), a + b)
    out = torch.ops.nkitest.add(a.to("nkipy"), b.to("nkipy"))
    assert out.device.type == "nkipy"
    torch.testing.assert_close(out.cpu(), a + b)


def test_a_registered_op_is_fused_into_the_kernel_around_it(graphs):
    a, b = torch.randn(128, 512), torch.randn(128, 512)
    out, fallbacks = _compile(lambda a, b: a * b * torch.ops.nkitest.add(a, b), graphs)(a, b)
    torch.testing.assert_close(out, a * b * (a + b))
    assert fallbacks == [] and _kernel_calls(graphs[0]) == 1
    (config,) = _configs(_kernel_sources())
    assert config["op"] == "nkitest::add" and config["grid"] == []
    assert config["kernel"].startswith("nki_tutorial:tensor_add_kernel#")
    assert "def tensor_add_kernel(a_input, b_input):" in config["source"]


@pytest.mark.parametrize(
    "op, grid",
    [
        ("tiled_add", [2, 2]),
        ("tiled_add_nc2", [{"spmd": 1, "nc": 2}, 2]),
    ],
)
def test_a_launch_grid_travels_with_the_custom_call(graphs, op, grid):
    a, b = torch.randn(256, 1024), torch.randn(256, 1024)
    out, fallbacks = _compile(lambda a, b: getattr(torch.ops.nkitest, op)(a, b) - 1, graphs)(a, b)
    torch.testing.assert_close(out, a + b - 1)
    assert fallbacks == [] and _kernel_calls(graphs[0]) == 1
    (config,) = _configs(_kernel_sources())
    assert config["grid"] == grid
    assert config["args"] == [["input", 0], ["input", 1], ["zeros", [256, 1024], "float32"]]
    assert config["result"] == ["arg", 2]


def test_an_op_registered_after_the_plugins_loaded_is_lowered(graphs):
    plugins.get()

    @NKIOpRegistry.register("nkitest::late_add")
    def late_kernel(a_input, b_input):
        return add_kernel.fn(a_input, b_input)

    @torch.library.custom_op("nkitest::late_add", mutates_args=())
    def late_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return late_kernel(a, b)

    late_add.register_fake(lambda a, b: torch.empty_like(a))
    a, b = torch.randn(128, 512), torch.randn(128, 512)
    out, fallbacks = _compile(lambda a, b: torch.ops.nkitest.late_add(a, b) + 1, graphs)(a, b)
    torch.testing.assert_close(out, a + b + 1)
    assert fallbacks == [] and _kernel_calls(graphs[0]) == 1


def test_a_body_that_computes_around_the_kernel_runs_as_torch_with_the_reason(graphs):
    a, b = torch.randn(128, 512), torch.randn(128, 512)
    out, fallbacks = _compile(lambda a, b: torch.ops.nkitest.add_then_double(a, b) + 1, graphs)(
        a, b
    )
    torch.testing.assert_close(out, (a + b) * 2 + 1)
    assert len(fallbacks) == 1
    assert "nkitest::add_then_double" in fallbacks[0]
    assert "its body returns something other than the kernel's result" in fallbacks[0]


def test_nki_op_makes_the_schema_fake_and_autograd(graphs):
    assert (
        str(torch.ops.nkitest.scale.default._schema)
        == "nkitest::scale(Tensor x, float alpha=1.) -> Tensor"
    )
    x = torch.randn(128, 64, requires_grad=True)
    torch.testing.assert_close(torch.ops.nkitest.scale(x, 3.0), x.detach() * 3)

    def loss(x):
        return (torch.ops.nkitest.scale(x, 3.0) * x).sum()

    xc = x.detach().clone().requires_grad_()
    out, fallbacks = _compile(loss, graphs)(xc)
    out.backward()
    loss(x).backward()
    torch.testing.assert_close(xc.grad, x.grad)
    assert fallbacks == []


def test_nki_op_rejects_a_signature_it_cannot_type():
    with pytest.raises(TypeError, match="the default of 'mode' must be a float, int or bool"):
        nki_op("nkitest::bad")(lambda x, mode="fast": x)


def test_an_op_name_without_a_namespace_is_refused():
    with pytest.raises(ValueError, match="'namespace::name'"):
        NKIOpRegistry.register("add")


@nki.jit
def exp_rows(a, c):
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.arange(a.shape[1])[None, :]
    nl.store(c[ix, iy], value=nl.exp(nl.load(a[ix, iy])))


def test_nki_jit_launches_on_numpy_arrays_and_torch_tensors_like_neurons():
    a = np.random.default_rng(0).random((256, 64), dtype=np.float32)
    c = np.zeros_like(a)
    assert exp_rows[2](a, c) is None
    np.testing.assert_allclose(c, np.exp(a), rtol=1e-6)
    t, out = torch.from_numpy(a), torch.zeros(256, 64).to("nkipy")
    exp_rows[2](t.to("nkipy"), out)  # an output buffer on the device is written back
    torch.testing.assert_close(out.cpu(), torch.exp(t))
