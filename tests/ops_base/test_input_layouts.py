"""Inputs in a transposed layout reach the kernel where they lie.

A transposed CPU tensor (``w.t()``, or the transposed weight AOTAutograd saves for a linear
layer's backward) goes into the kernel in its memory order, row-major, and the kernel transposes
it back first (``lower.input_orders``): a runtime that reads only row-major arrays (XLA) would
otherwise copy it at every call. These run on the configured runtime and check the numbers
against eager and that every array handed to the runtime is row-major.
"""

from __future__ import annotations

import copy

import pytest
import torch

from nkipy_core.config import settings


@pytest.fixture
def host_arrays(monkeypatch):
    """The arrays every kernel call hands the runtime, per call."""
    runtime = settings.select_runtime(settings.current())
    calls: list[list] = []
    run_host = runtime.run_host

    def spy(executable, arrays):
        calls.append(list(arrays))
        return run_host(executable, arrays)

    monkeypatch.setattr(runtime, "run_host", spy)
    return calls


def _randn(*shape, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(len(shape))).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_transposed_inputs_are_passed_in_their_memory_order(host_arrays, dtype):
    x = _randn(2, 6, 4, dtype=dtype)

    def fn(x, w_t, y, z):
        return torch.matmul(x, w_t) + 1, y * 2 + z.sum(1)

    w_t = _randn(5, 4, dtype=dtype).t()  # (4, 5), strides (1, 4)
    y = _randn(3, 5, 7, dtype=dtype).permute(2, 0, 1)  # (7, 3, 5): a 3-d permutation
    z = _randn(2, 7, 3, 5, dtype=dtype).transpose(0, 1)
    compiled = torch.compile(fn, backend="nkipy", options={"strict": True})
    got, expected = compiled(x, w_t, y, z), fn(x, w_t, y, z)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
    assert host_arrays, "no kernel ran on host arrays"
    for arrays in host_arrays:
        assert all(a.flags.c_contiguous for a in arrays), [a.strides for a in arrays]


def test_a_linear_layers_backward_reads_the_saved_weight_where_it_lies(host_arrays):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    reference = copy.deepcopy(model)
    x = _randn(3, 8)
    compiled = torch.compile(model, backend="nkipy", options={"strict": True})
    compiled(x).square().sum().backward()
    reference(x).square().sum().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    assert len(host_arrays) >= 2  # forward and backward kernels
    for arrays in host_arrays:
        assert all(a.flags.c_contiguous for a in arrays), [a.strides for a in arrays]
