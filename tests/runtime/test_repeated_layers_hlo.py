"""What ``neuronx-cc`` is handed for a Llama of 2 and of 8 layers, compiled for ``nrt`` ahead of
time (``precompile``) while the program runs here: with ``dedup_layers`` the same kernels, of the
same sizes, whatever the depth; without it one kernel per graph that grows with the layers (2
against 4 layers there, to keep the test short).

The compiler is a STAND-IN (``tests/support/neuronx_cc_standin.py``): the real neuronx-cc was not
run. The HLO counted is the one each nrt cache entry holds, which is what the stand-in was given.
"""

from __future__ import annotations

import json

import neuronx_cc_standin
import pytest
import torch

from nkipy_core.testing.models import LlamaModel
from nkipy_runtime import neuronx_cc
from nkipy_runtime.neuron import hlo_text


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The stand-in compiler (not the real neuronx-cc), named by NKIPY_NEURONX_CC; its call log."""
    path, calls = neuronx_cc_standin.install(tmp_path / "bin")
    monkeypatch.setenv(neuronx_cc.COMPILER_ENV, str(path))
    return calls


def _handed_to_compiler(tmp_path, standin, layers: int, dedup: bool) -> tuple[int, list[int]]:
    """Compiles of a training step for nrt: (stand-in calls, HLO instructions per kernel)."""
    cache = tmp_path / f"cache-{layers}-{dedup}"
    model = LlamaModel(layers)
    options = {
        "nkipy_cache": str(cache),
        "precompile": "nrt",
        "target": "trn1",
        "dedup_layers": dedup,
    }
    torch._dynamo.reset()
    before = len(neuronx_cc_standin.calls(standin))
    torch.compile(model, backend="nkipy", options=options)(model.example_input()).sum().backward()
    sizes = []
    for entry in sorted((cache / "kernels").iterdir()):
        if json.loads((entry / "meta.json").read_text())["runtime"] == "nrt":
            (text,) = entry.rglob("hlo.txt")
            sizes.append(sum(1 for _ in hlo_text.parse(text.read_text()).instructions()))
    return len(neuronx_cc_standin.calls(standin)) - before, sizes


def test_kernels_handed_to_the_compiler_do_not_grow_with_the_layers(tmp_path, standin):
    compiles_2, sizes_2 = _handed_to_compiler(tmp_path, standin, 2, dedup=True)
    compiles_8, sizes_8 = _handed_to_compiler(tmp_path, standin, 8, dedup=True)
    # forward and backward: embedding glue, one layer, head glue
    assert compiles_2 == compiles_8 == len(sizes_2) == len(sizes_8) == 6
    assert sorted(sizes_2) == sorted(sizes_8)


def test_without_dedup_one_kernel_per_graph_grows_with_the_layers(tmp_path, standin):
    compiles_2, sizes_2 = _handed_to_compiler(tmp_path, standin, 2, dedup=False)
    compiles_4, sizes_4 = _handed_to_compiler(tmp_path, standin, 4, dedup=False)
    assert compiles_2 == compiles_4 == 2
    assert max(sizes_4) > 1.5 * max(sizes_2)
