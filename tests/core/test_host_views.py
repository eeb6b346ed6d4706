"""The NumPy views a kernel keeps of its CPU inputs (``nkipy_core.compiler.host_views``): reused while the
same tensor comes back, always reading the tensor's current memory, never keeping it alive."""

import gc
import weakref

import torch

from nkipy_core.compiler.host_views import HostViews


def test_a_tensor_seen_again_gets_the_same_view_which_does_not_refer_to_it():
    views = HostViews(2)
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    views.arrays([a, b])
    second = views.arrays([a, b])
    third = views.arrays([a, b])
    assert third[0] is second[0] and third[1] is second[1]
    assert not any(isinstance(base, torch.Tensor) for base in (third[0].base, third[1].base))
    a.mul_(2)  # the view reads the tensor's memory as it is now
    assert (third[0] == a.numpy()).all()


def test_a_position_whose_tensor_changes_is_no_longer_tracked():
    views = HostViews(1)
    for _ in range(3):
        t = torch.randn(5)
        (array,) = views.arrays([t])
        assert (array == t.numpy()).all() and isinstance(
            array.base, torch.Tensor
        )  # numpy()'s own view
    kept = torch.randn(5)
    views.arrays([kept])
    views.arrays([kept])
    assert isinstance(views.arrays([kept])[0].base, torch.Tensor)  # still untracked: no kept view


def test_a_new_storage_under_the_same_tensor_is_seen():
    views = HostViews(1)
    t = torch.zeros(6)
    views.arrays([t])
    views.arrays([t])
    t.data = torch.arange(6.0)  # same object, same shape, other memory
    (array,) = views.arrays([t])
    assert array.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_views_keep_no_tensor_alive():
    views = HostViews(1)
    t = torch.randn(1000)
    views.arrays([t])
    views.arrays([t])
    views.arrays([t])
    alive = weakref.ref(t)
    del t
    gc.collect()
    assert alive() is None


def test_compiled_graph_reads_updated_and_replaced_inputs():
    fn = torch.compile(lambda x, y: x * y + 1, backend="nkipy")
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    for _ in range(3):
        torch.testing.assert_close(fn(x, y), x * y + 1)
    x.add_(1.5)  # same tensor, new values
    torch.testing.assert_close(fn(x, y), x * y + 1)
    y.data = torch.randn(8, 8)  # same tensor object, new memory
    torch.testing.assert_close(fn(x, y), x * y + 1)
    torch.testing.assert_close(fn(y, x), y * x + 1)  # the tensors swap positions
