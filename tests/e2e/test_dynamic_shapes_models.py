"""The reference models with sizes that change between calls, with nkipy-ops-base installed.

Dynamo's automatic dynamic shapes give the backend graphs with symbolic sizes from the second
size on; each size set must still run as kernels (no op on CPU) and match eager, forward and
backward, on CPU tensors and on the ``nkipy`` device.
"""

from __future__ import annotations

import copy
import warnings

import torch

from nkipy_core import FallbackWarning, cache_stats
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.compiler.plan import TORCH_VIEW
from nkipy_core.testing.models import LlamaBlock, QuickStartMLP


def _fallbacks(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]


def _ops_on_cpu(graphs) -> list:
    """ATen ops between kernels, but for the views of inputs that graphs return as torch views
    (a saved ``w.t()``): those compute nothing."""
    return [
        n.target
        for gm in graphs
        for n in gm.graph.nodes
        if n.op == "call_function"
        and isinstance(n.target, torch._ops.OpOverload)
        and not n.meta.get(TORCH_VIEW)
    ]


def test_training_steps_with_a_changing_batch_match_eager(graphs):
    model, reference = QuickStartMLP(seed=1), QuickStartMLP(seed=1)
    compiled = torch.compile(model, backend="nkipy")
    before = cache_stats["specializations"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in (8, 5, 12, 5):
            x = torch.randn(batch, 64)
            x_compiled, x_eager = x.clone().requires_grad_(), x.clone().requires_grad_()
            out = compiled(x_compiled)
            grad = torch.randn(out.shape)
            out.backward(grad)
            expected = reference(x_eager)
            expected.backward(grad)
            torch.testing.assert_close(out, expected)
            torch.testing.assert_close(x_compiled.grad, x_eager.grad)
            for p, q in zip(model.parameters(), reference.parameters()):
                torch.testing.assert_close(p.grad, q.grad)
                p.grad, q.grad = None, None
    assert _fallbacks(caught) == []
    # static forward + backward for 8; then the dynamic pair for 5 and for 12 (5 again is reused)
    assert cache_stats["specializations"] - before == 4
    assert len(graphs) == 6 and _ops_on_cpu(graphs) == []
    assert all(sum(isinstance(m, KernelCall) for m in gm.children()) == 1 for gm in graphs)


def test_llama_block_over_ten_sequence_lengths_is_all_kernels(graphs):
    block = LlamaBlock(seed=1)
    compiled = torch.compile(block, backend="nkipy")
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for seq in range(8, 18):
            x = torch.randn(2, seq, 64)
            torch.testing.assert_close(compiled(x), block(x), rtol=2e-5, atol=2e-5)
    assert _fallbacks(caught) == []
    assert len(graphs) == 10 and _ops_on_cpu(graphs) == []


def test_device_tensors_with_a_changing_batch_stay_on_the_device(graphs):
    model = torch.nn.Linear(8, 4)
    reference = copy.deepcopy(model)
    model.to("nkipy")
    compiled = torch.compile(lambda a: torch.relu(model(a)) * a.shape[0], backend="nkipy")
    for batch in (3, 6, 9):
        x = torch.randn(batch, 8)
        on_device = x.to("nkipy")
        before = torch.nkipy.transfer_stats()
        with torch.no_grad():
            out = compiled(on_device)
        assert torch.nkipy.transfer_stats() == before  # specialising does not copy to the host
        assert out.device.type == "nkipy"
        torch.testing.assert_close(out.cpu(), torch.relu(reference(x)) * batch)
    assert len(graphs) == 3 and _ops_on_cpu(graphs) == []
