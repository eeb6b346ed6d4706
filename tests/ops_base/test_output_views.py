"""Graph outputs that are views of graph inputs stay torch views (``prepare.outputs_as_views``).

AOTAutograd saves a linear layer's ``w.t()`` for the backward: a forward output that is a view of
a parameter. Computed in a kernel it would be a copy of the weight at every step; as a torch view
it is what eager returns, sharing the weight's memory. A ``clone`` must still be new memory.
"""

import copy

import torch

STRICT = {"strict": True}


def _compiled(fn):
    return torch.compile(fn, backend="nkipy", fullgraph=True, options=STRICT)


def test_a_view_of_an_input_is_returned_as_a_view():
    x, w = torch.randn(3, 4), torch.randn(5, 4)

    def fn(x, w):
        t = w.t()
        return x @ t, t, w[1:].transpose(0, 1)

    got = _compiled(fn)(x, w)
    for g, e in zip(got, fn(x, w), strict=True):
        torch.testing.assert_close(g, e)
    assert got[1].untyped_storage().data_ptr() == w.untyped_storage().data_ptr()
    assert got[2].untyped_storage().data_ptr() == w.untyped_storage().data_ptr()
    assert got[2].stride() == (1, 4) and got[2].storage_offset() == 4


def test_a_clone_of_an_input_is_new_memory():
    w = torch.randn(5, 4)
    got = _compiled(lambda w: (w.clone(), w.t().clone(), w.t().contiguous()))(w)
    for g in got:
        assert g.untyped_storage().data_ptr() != w.untyped_storage().data_ptr()
    torch.testing.assert_close(got[1], w.t())


def test_a_view_of_an_input_written_in_place_matches_eager():
    def fn(w):
        t = w.t()
        w.add_(1)
        return t * 2, t

    w1 = torch.randn(3, 2)
    w2 = w1.clone()
    got, expected = _compiled(fn)(w1), fn(w2)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
    torch.testing.assert_close(w1, w2)


def test_a_training_step_saves_the_transposed_weight_without_copying_it():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    reference = copy.deepcopy(model)
    x = torch.randn(3, 8)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        loss = _compiled(model)(x).square().sum()
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert any(t.untyped_storage().data_ptr() in weights for t in saved)
    loss.backward()
    reference(x).square().sum().backward()
    for p, r in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, r.grad)
