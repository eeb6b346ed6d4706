"""A compiled graph's new tensors are laid out as eager's: row-major where eager's are, whatever
layout the runtime's kernel computed them in, so code that views them as eager's results works,
and a buffer made in one graph and updated in place by the next (a KV cache) is updated inside
that graph's kernel."""

from __future__ import annotations

import torch

from nkipy_core.compiler import kernel_call


def transposed_then_contiguous(x):
    return (x.transpose(0, 1) * 2).contiguous()


def transposed(x):
    return x.transpose(0, 1) * 2  # eager keeps the operand's layout: a transposed result


def make_cache(new):
    """A cache made and first filled in the graph, as a ``StaticCache``'s first call does."""
    cache = torch.zeros(1, 4, 16, 8)
    cache.index_copy_(2, torch.arange(new.shape[2]), new)
    return cache


def update(cache, position, new):
    cache.index_copy_(2, position, new)
    return cache.sum(-1)


def test_results_have_eagers_strides():
    x = torch.randn(6, 5)
    new = torch.randn(1, 4, 3, 8)
    for fn, args in (
        (transposed_then_contiguous, (x,)),
        (transposed, (x,)),
        (make_cache, (new,)),
    ):
        got = torch.compile(fn, backend="nkipy", options={"strict": True})(*args)
        want = fn(*args)
        assert got.stride() == want.stride(), fn.__name__
        torch.testing.assert_close(got, want)
    assert transposed_then_contiguous(x).view(-1).shape == (30,)


def test_a_cache_made_by_one_graph_is_updated_in_the_next_ones_kernel():
    new = torch.randn(1, 4, 3, 8)
    cache = torch.compile(make_cache, backend="nkipy", options={"strict": True})(new)
    expected = make_cache(new)
    step = torch.compile(update, backend="nkipy", options={"strict": True})
    earlier = set(kernel_call._LIVE)
    address = cache.data_ptr()
    for i in range(3, 6):
        position, token = torch.tensor([i]), torch.randn(1, 4, 1, 8)
        torch.testing.assert_close(step(cache, position, token), update(expected, position, token))
        torch.testing.assert_close(cache, expected)
    assert cache.data_ptr() == address
    (call,) = set(kernel_call._LIVE) - earlier
    assert [j for _, j in call.boundary.writes] == [0]  # the cache's copy_ taken into the call
