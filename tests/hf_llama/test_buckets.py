"""Greedy generation over 20 prompt lengths, 5 to 100 tokens, with the prompt padded to
power-of-two buckets (``nkipy_core.buckets.generate``): at most 5 prefill kernel graphs, and
exactly eager's tokens (eager: the unpadded prompt, torch on CPU).

A *prefill kernel graph* is a kernel graph nkipy compiled (a dynamo graph, or a new size set of
a graph with symbolic sizes: one line of ``<cache>/stats/recompiles.jsonl`` each) during a call
of the model's forward over more than one token. Without buckets every length compiles one (20).
"""

from __future__ import annotations

import torch
from generate import small_llama

from nkipy_core import buckets
from nkipy_core.observe import recompiles

CACHE = "nkipy_cache"  # the tests' default: ./nkipy_cache in each test's own directory
LENGTHS = [5 + 5 * i for i in range(20)]  # 5, 10, ..., 100


class PrefillCounter:
    """The compiled forward, counting the kernel graphs compiled during prefill calls."""

    def __init__(self, forward):
        self.forward = forward
        self.prefill_graphs = 0

    def __call__(self, *args, **kwargs):
        before = len(recompiles.read(CACHE))
        out = self.forward(*args, **kwargs)
        if kwargs["input_ids"].shape[1] > 1:
            self.prefill_graphs += len(recompiles.read(CACHE)) - before
        return out


def test_bucketed_prompts_compile_at_most_five_prefill_graphs_and_match_eager():
    model = small_llama(seed=1, max_positions=256).eval()
    eager_forward = model.forward
    counter = PrefillCounter(torch.compile(model.forward, backend="nkipy"))
    prompts = torch.Generator().manual_seed(0)
    settings = {"max_new_tokens": 3, "do_sample": False}
    with torch.no_grad():
        for length in LENGTHS:
            prompt = torch.randint(0, model.config.vocab_size, (1, length), generator=prompts)
            model.forward = eager_forward
            expected = model.generate(prompt, attention_mask=torch.ones_like(prompt), **settings)
            model.forward = counter
            tokens = buckets.generate(model, prompt, cache_implementation="static", **settings)
            assert torch.equal(tokens, expected), (length, tokens, expected)
    assert counter.prefill_graphs == 5  # buckets 8, 16, 32, 64, 128
    assert len(recompiles.read(CACHE)) == 10  # and a decode graph per bucket (its cache length)
