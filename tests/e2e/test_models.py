"""The reference models through ``torch.compile(backend="nkipy")`` with nkipy-ops-base installed.

A training step of the quick-start MLP and of a Llama decoder block (explicit softmax attention
and ``scaled_dot_product_attention``) must compile into exactly one kernel per AOTAutograd graph
(forward and backward), with no op falling back to CPU, and match eager's outputs and gradients
in f32 and bf16.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from nkipy_core import FallbackWarning
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.testing.models import LlamaBlock, QuickStartMLP

#: max |compiled - eager| relative to max |eager|; bf16 graphs round at other places than eager
TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 3e-2}


def _model(name: str):
    if name == "mlp":
        return QuickStartMLP(seed=1), torch.randn(8, 64, generator=torch.Generator().manual_seed(1))
    model = LlamaBlock(sdpa=name == "llama-sdpa", seed=1)
    return model, model.example_input(seed=1)


def _assert_close(
    actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str
) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    scale = expected.float().abs().max().clamp_min(1e-6)
    error = ((actual.float() - expected.float()).abs().max() / scale).item()
    assert error <= TOLERANCE[dtype], f"{what}: relative error {error:.3g} > {TOLERANCE[dtype]}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["mlp", "llama", "llama-sdpa"])
def test_training_step_is_one_kernel_per_graph_and_matches_eager(name, dtype, graphs):
    model, x = _model(name)
    model, x = model.to(dtype), x.to(dtype)
    reference = copy.deepcopy(model)
    x_compiled, x_eager = x.clone().requires_grad_(), x.clone().requires_grad_()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(model, backend="nkipy")(x_compiled)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
        out.backward(grad)
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert fallbacks == []

    expected = reference(x_eager)
    expected.backward(grad)
    _assert_close(out, expected, dtype, "output")
    _assert_close(x_compiled.grad, x_eager.grad, dtype, "input gradient")
    for (param, p), q in zip(model.named_parameters(), reference.parameters()):
        _assert_close(p.grad, q.grad, dtype, f"gradient of {param}")

    assert [sum(isinstance(m, KernelCall) for m in gm.children()) for gm in graphs] == [1, 1]


def test_llama_inference_is_one_kernel(graphs):
    model, x = _model("llama")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        out = torch.compile(model, backend="nkipy")(x)
        expected = model(x)
    _assert_close(out, expected, torch.float32, "output")
    assert [sum(isinstance(m, KernelCall) for m in gm.children()) for gm in graphs] == [1]
