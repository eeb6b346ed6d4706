"""Tensor-parallel greedy generation of transformers' ``LlamaForCausalLM`` over two real ranks
(torchrun, examples/hf_llama/tp_generate.py): sharded by the model's own TP plan over a ``nkipy``
DeviceMesh, compiled by nkipy, it gives the single-process eager tokens."""

from __future__ import annotations

from pathlib import Path

from torchrun import torchrun

EXAMPLE = Path(__file__).parents[2] / "examples" / "hf_llama" / "tp_generate.py"


def test_tensor_parallel_tokens_match_single_process_eager(nki_overrides):
    done = torchrun(str(EXAMPLE), "--new-tokens", "4", timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    # prefill and decode compiled once each (the embedding, one kernel both decoder layers call,
    # the head), the all-reduces inside; later decode steps compile nothing
    assert (
        f"ranks 2: matches single-process eager: True; kernels {2 if nki_overrides else 6}; "
        "ops on CPU 0; "
        "after the first decode step: 0 graphs compiled, 0 kernels looked up"
    ) in done.stdout, done.stdout
