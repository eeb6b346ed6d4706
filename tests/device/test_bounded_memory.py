"""Long eager loops over ever new shapes, dtypes and Python numbers keep the process's compiled
state bounded: the device's caches hold at most their bound of kernels (``docs/caching.md``),
count what they evict, results stay CPU's, and the process's memory stops growing once the
caches are full."""

import gc
import os

import pytest
import torch

from nkipy_core import cache_stats, live_kernels
from nkipy_core.device import eager

#: the eager caches' bound in these tests: small, so that the loops cycle through it many times
BOUND = 32
#: distinct values of each loop (each new shape compiles a kernel, about 30 ms; numbers do not)
SHAPES = 600
DTYPES = (torch.float32, torch.bfloat16, torch.int32, torch.float64)
SHAPES_PER_DTYPE = 100
NUMBERS = 3000
#: RSS growth allowed per value once the caches are full. A kernel held in memory costs about
#: 30 KB (its KernelCall, loaded executable and generated code, measured with the bound lifted),
#: so holding one per value exceeds this; what stays per *compiled* kernel is about 10 KB
#: (allocator state and its ``kernel_stats`` record, see docs/caching.md), and nothing per
#: number the kernels take as inputs.
MAX_GROWTH_KB_PER_VALUE = 20


def _rss_mb() -> float:
    """The process's resident memory now (``getrusage``'s is the peak, which never goes down)."""
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _eager_kernel_bound() -> int:
    """The most eager kernels the device's caches can hold: a kernel per call signature and
    one per fast key (which may outlive its signature's entry); the loops here bake no number
    into a kernel, so no ``_ByValue`` entries add to it."""
    return 2 * eager.MAX_SIGNATURES


@pytest.fixture
def bounded(monkeypatch, per_op):
    monkeypatch.setattr(eager, "MAX_SIGNATURES", BOUND)
    torch.ones(1).to("nkipy").neg()  # the device's caches for this test's configuration
    gc.collect()
    return live_kernels()  # kernels alive before the loop (earlier tests' graphs, this one)


def _loop(step, values, baseline: int) -> tuple[float, int]:
    """Run ``step`` on every value; the RSS growth per value (KB) after the first ``4 * BOUND``
    values (the caches are full then) and the most kernels alive beyond ``baseline`` at any
    point."""
    warm = 4 * BOUND
    most = 0
    for i, value in enumerate(values):
        if i == warm:
            start = _rss_mb()
        step(value)
        if i % BOUND == 0:
            most = max(most, live_kernels() - baseline)
    growth = (_rss_mb() - start) * 1024 / (len(values) - warm)
    return growth, max(most, live_kernels() - baseline)


def _int(k: int) -> int:
    """The ``k``-th of 2, -3, 4, -5, ..."""
    return 2 + k if k % 2 == 0 else -(2 + k)


def _check(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.device.type == "nkipy"
    torch.testing.assert_close(got.cpu(), want, atol=0, rtol=0)


def test_a_loop_over_thousands_of_python_numbers_compiles_no_kernel_per_value(bounded):
    """Floats and ints given to ``mul``, ``add``, ``clamp`` and ``fill_`` are kernel inputs: a
    few kernels serve every value."""
    x = torch.linspace(-3, 3, 6)
    d = x.to("nkipy")
    ops = {
        "mul": lambda t, s: t * s,
        "add": lambda t, s: t + s,
        "clamp": lambda t, s: torch.clamp(t, min=s),
        "fill_": lambda t, s: t.clone().fill_(s),
    }

    def step(s):
        for op in ops.values():
            _check(op(d, s), op(x, s))

    # a float and an int in turn, of both signs, never 0 or ±1 (always keyed by value: rules
    # special-case them), no float equal to an int
    values = [_int(i // 2) if i % 2 else -2.5 + i * 1e-3 + 1e-4 for i in range(NUMBERS)]
    step(values[0]), step(values[1])  # one kernel per op, and for a float and an int operand
    compiled = cache_stats["compiled_kernels"]
    growth, kernels = _loop(step, values, bounded)
    assert len(set(values)) == NUMBERS
    assert cache_stats["compiled_kernels"] == compiled
    assert kernels <= _eager_kernel_bound()
    assert growth < MAX_GROWTH_KB_PER_VALUE, f"RSS grew {growth:.1f} KB per number"


def test_a_loop_over_hundreds_of_shapes_keeps_a_bounded_number_of_kernels(bounded):
    evictions = cache_stats["eager_signatures_evictions"]

    def step(n):
        x = torch.linspace(-1, 1, n)
        _check(torch.add(x.to("nkipy"), x.to("nkipy")), x + x)

    growth, kernels = _loop(step, range(1, SHAPES + 1), bounded)
    assert kernels <= _eager_kernel_bound()
    assert cache_stats["eager_signatures_evictions"] - evictions >= SHAPES - BOUND
    assert growth < MAX_GROWTH_KB_PER_VALUE, f"RSS grew {growth:.1f} KB per shape"


def test_a_loop_over_dtypes_and_shapes_keeps_a_bounded_number_of_kernels(bounded):
    evictions = cache_stats["eager_signatures_evictions"]
    pairs = [(dtype, n) for n in range(1, SHAPES_PER_DTYPE + 1) for dtype in DTYPES]

    def step(pair):
        dtype, n = pair
        x = torch.arange(n).to(dtype)
        _check(torch.mul(x.to("nkipy"), x.to("nkipy")), x * x)

    growth, kernels = _loop(step, pairs, bounded)
    assert kernels <= _eager_kernel_bound()
    assert cache_stats["eager_signatures_evictions"] - evictions >= len(pairs) - BOUND
    assert growth < MAX_GROWTH_KB_PER_VALUE, f"RSS grew {growth:.1f} KB per signature"
