"""Greedy generation of transformers' ``LlamaForCausalLM`` compiled by nkipy (examples/hf_llama/generate.py):
the tokens equal eager's, prefill and decode are one kernel each, and decode steps after the
first compile nothing, with the model on CPU or on the ``nkipy`` device."""

from __future__ import annotations

import pytest
import torch
from generate import compare, load_model, small_llama


@pytest.mark.parametrize("device", ["cpu", "nkipy"])
def test_greedy_tokens_of_a_local_checkpoint_match_eager_and_decode_reuses_one_kernel(
    tmp_path, device, nki_overrides
):
    small_llama(seed=1).save_pretrained(tmp_path / "llama")
    model = load_model(str(tmp_path / "llama"))
    prompt = torch.randint(
        0, model.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(0)
    )
    result = compare(model, prompt, new_tokens=5, device=device)
    assert torch.equal(result["tokens"], result["expected"]), (result["tokens"], result["expected"])
    assert result["tokens"].shape == (2, 5)
    # prefill and decode: each the embedding, one kernel both decoder layers call, the head
    assert result["kernels"] == (2 if nki_overrides else 6)
    assert result["fallback_ops"] == 0
    assert result["after_first_decode"] == (0, 0)  # no graph compiled, no kernel looked up
