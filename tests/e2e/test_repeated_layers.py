"""A model's repeated layers are one kernel per distinct layer, compiled once and called once per
layer (``Config.dedup_layers``, ``compiler/blocks.py``): a 4-layer Llama's forward and backward
each compile the embedding glue, one decoder layer and the head glue, and match eager.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import nkipy_core
from nkipy_core import FallbackWarning
from nkipy_core.cache.kernel_cache import STATS
from nkipy_core.compiler.kernel_call import KernelCall
from nkipy_core.testing.models import LlamaModel

LAYERS = 4


def _calls(gm: torch.fx.GraphModule) -> list[KernelCall]:
    """The kernel calls of a compiled graph, in the order the graph makes them."""
    return [gm.get_submodule(n.target) for n in gm.graph.nodes if n.op == "call_module"]  # type: ignore[misc]


def _step(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids)
    logits.float().pow(2).mean().backward()
    return logits


def test_training_step_compiles_one_kernel_per_distinct_layer_and_matches_eager(graphs):
    model = LlamaModel(LAYERS, seed=1)
    reference = copy.deepcopy(model)
    ids = model.example_input(seed=1)
    before = dict(STATS)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        compiled = torch.compile(model, backend="nkipy")
        out = _step(compiled, ids)
    expected = _step(reference, ids)
    torch.testing.assert_close(out, expected, rtol=2e-5, atol=2e-5)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-5, atol=2e-5, msg=name)

    # forward and backward: embedding glue, LAYERS calls of one layer kernel, head glue
    for gm in graphs:
        calls = _calls(gm)
        assert len(calls) == LAYERS + 2
        layer = {c.entry for c in calls[1:-1]}
        assert len(layer) == 1 and calls[0].entry not in layer and calls[-1].entry not in layer
    compiled_kernels = STATS["compiled_kernels"] - before.get("compiled_kernels", 0)
    lowered_kernels = STATS["lowered_kernels"] - before.get("lowered_kernels", 0)
    assert compiled_kernels == lowered_kernels == 2 * 3

    # each call of the layer kernel counts into its one record: LAYERS calls per step
    nkipy_core.reset_kernel_stats()
    _step(compiled, ids)
    layer_keys = {_calls(gm)[1].entry for gm in graphs}
    calls_of = {s.key: s.calls for s in nkipy_core.kernel_stats()}
    assert [calls_of[k] for k in sorted(layer_keys)] == [LAYERS, LAYERS]


def test_inference_calls_one_layer_kernel_per_layer(graphs):
    model = LlamaModel(LAYERS, seed=2).eval()
    ids = model.example_input(seed=2)
    before = STATS["compiled_kernels"]
    with torch.no_grad():
        out = torch.compile(model, backend="nkipy")(ids)
        expected = model(ids)
    torch.testing.assert_close(out, expected, rtol=2e-5, atol=2e-5)
    (gm,) = graphs
    assert len(_calls(gm)) == LAYERS + 2
    assert len({c.entry for c in _calls(gm)}) == 3
    assert STATS["compiled_kernels"] - before == 3


@pytest.mark.parametrize("how", ["option", "environment"])
def test_turned_off_each_graph_is_one_kernel_again(how, graphs, monkeypatch):
    model = LlamaModel(2, seed=3)
    options = {}
    if how == "option":
        options["dedup_layers"] = False
    else:
        monkeypatch.setenv("NKIPY_DEDUP_LAYERS", "0")
    reference = copy.deepcopy(model)
    ids = model.example_input(seed=3)
    out = _step(torch.compile(model, backend="nkipy", options=options), ids)
    torch.testing.assert_close(out, _step(reference, ids), rtol=2e-5, atol=2e-5)
    assert [len(_calls(gm)) for gm in graphs] == [1, 1]


def test_layers_that_differ_are_not_split(graphs):
    """Items of a container that run different shapes are not a repeated layer: a Sequential
    of torch's own Linear layers, and layers of the model's own class of different sizes,
    stay fused."""

    class Layer(torch.nn.Module):
        def __init__(self, n: int, m: int):
            super().__init__()
            self.linear = torch.nn.Linear(n, m)

        def forward(self, x):
            return torch.relu(self.linear(x))

    model = torch.nn.Sequential(
        torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), Layer(8, 16), Layer(16, 8)
    )
    x = torch.randn(4, 8)
    with torch.no_grad():
        out = torch.compile(model, backend="nkipy")(x)
        torch.testing.assert_close(out, model(x))
    assert [len(_calls(gm)) for gm in graphs] == [1]
