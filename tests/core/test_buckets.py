"""``nkipy_core.buckets``: sizes padded to a few buckets, and generation over a bucketed prompt."""

import types

import pytest
import torch

from nkipy_core import buckets


def test_next_bucket_is_the_next_power_of_two_or_the_smallest_listed_that_fits():
    assert [buckets.next_bucket(n) for n in (0, 1, 2, 3, 5, 8, 9, 100)] == [
        1,
        1,
        2,
        4,
        8,
        8,
        16,
        128,
    ]
    assert [buckets.next_bucket(n, [48, 16, 32]) for n in (1, 16, 17, 48)] == [16, 16, 32, 48]
    with pytest.raises(ValueError, match=r"size 49 is larger than every bucket \[16, 32, 48\]"):
        buckets.next_bucket(49, [16, 32, 48])


def test_pad_to_bucket_pads_one_side_of_one_dimension():
    x = torch.arange(6.0).reshape(2, 3)
    right = buckets.pad_to_bucket(x, dim=-1, value=-1)
    assert torch.equal(right, torch.tensor([[0, 1, 2, -1], [3, 4, 5, -1.0]]))
    left = buckets.pad_to_bucket(x, dim=0, buckets=[3], side="left")
    assert torch.equal(left, torch.cat([torch.zeros(1, 3), x]))
    assert buckets.pad_to_bucket(x, dim=0) is x  # 2 is a bucket already
    with pytest.raises(ValueError, match="side is 'left' or 'right'"):
        buckets.pad_to_bucket(x, 0, side="top")


class EchoModel:
    """Stands in for a Hugging Face model: ``generate`` returns the prompt and, as new tokens,
    the sum of each row's unmasked tokens; it records what it was given."""

    generation_config = types.SimpleNamespace(pad_token_id=None, eos_token_id=[9, 8])

    def generate(self, input_ids, attention_mask, max_new_tokens):
        self.given = input_ids, attention_mask
        new = (input_ids * attention_mask).sum(1, keepdim=True).expand(-1, max_new_tokens)
        return torch.cat([input_ids, new], dim=1)


def test_generate_left_pads_the_prompt_under_its_mask_and_returns_the_unpadded_tokens():
    model = EchoModel()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    tokens = buckets.generate(model, prompt, buckets=[5], pad_batch=True, max_new_tokens=2)
    assert torch.equal(
        tokens, torch.tensor([[1, 2, 3, 6, 6], [4, 5, 6, 15, 15], [7, 8, 9, 24, 24]])
    )
    ids, mask = model.given
    assert ids.shape == mask.shape == (4, 5)  # the batch padded to 4 with a copy of row 0
    assert torch.equal(ids[0], torch.tensor([9, 9, 1, 2, 3]))  # the end of sequence token
    assert torch.equal(mask[0], torch.tensor([0, 0, 1, 1, 1]))
    assert torch.equal(ids[3], ids[0]) and torch.equal(mask[3], mask[0])
