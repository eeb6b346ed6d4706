"""Training transformers' ``LlamaForCausalLM`` with attention dropout and AdamW, compiled by nkipy
(examples/hf_llama/train.py): the loss curve follows eager's, exactly when dropout masks come from
torch's generator (``fallback_random``)."""

from __future__ import annotations

import pytest
import torch
from generate import small_llama
from train import DROPOUT_TOLERANCE, EXACT_TOLERANCE, compare

STEPS = 4


@pytest.fixture(scope="module")
def model_and_batch():
    model = small_llama(attention_dropout=0.2)
    return model, torch.randint(
        0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1)
    )


def test_losses_equal_eager_with_masks_from_torchs_generator(model_and_batch):
    model, batch = model_and_batch
    result = compare(model, batch, STEPS, fallback_random=True)
    assert result["max_difference"] <= EXACT_TOLERANCE, (result["losses"], result["expected"])
    assert result["losses"][-1] < result["losses"][0]  # it trains
    # forward and backward, each cut at the decoder layers (repeated layers compiled once); the
    # masks drawn on the host cut the forward's layers once more
    assert result["kernels"] == 8 and result["fallback_ops"] == 0


def test_losses_follow_eager_with_masks_drawn_in_the_kernels(model_and_batch):
    """The kernels' masks are not torch's: the curves differ, within the tolerance."""
    model, batch = model_and_batch
    result = compare(model, batch, STEPS)
    assert EXACT_TOLERANCE < result["max_difference"] <= DROPOUT_TOLERANCE, (
        result["losses"],
        result["expected"],
    )
    assert result["losses"][-1] < result["losses"][0]
    assert result["kernels"] == 7 and result["fallback_ops"] == 0
