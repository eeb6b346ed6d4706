"""Bit shifts, ``gcd`` and ``lcm`` compiled, bit-exact against eager: every dtype, shift counts
past the width and negative ones, Euclid's worst cases (consecutive Fibonacci numbers)."""

from __future__ import annotations

import pytest
import torch

INTEGERS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


def compiled(fn):
    return torch.compile(fn, backend="nkipy", options={"strict": True})


def _values(dtype) -> torch.Tensor:
    info = torch.iinfo(dtype)
    edges = [info.min, info.min + 1, -7, -1, 0, 1, 5, 100, info.max - 1, info.max]
    return torch.tensor([v for v in edges if info.min <= v <= info.max], dtype=dtype)


@pytest.mark.parametrize("dtype", INTEGERS)
@pytest.mark.parametrize("op", [torch.bitwise_left_shift, torch.bitwise_right_shift])
def test_shifts_match_eager_for_every_count(op, dtype):
    info = torch.iinfo(dtype)
    x = _values(dtype)
    counts = torch.tensor([c for c in range(-3, 70) if info.min <= c <= info.max], dtype=dtype)
    x, counts = x[:, None].expand(-1, len(counts)), counts[None, :].expand(len(x), -1)
    assert torch.equal(compiled(op)(x, counts), op(x, counts))


def test_shift_operators_with_python_numbers():
    x = torch.tensor([-9, -1, 0, 3, 1 << 40])
    fn = compiled(lambda v: (v << 3, v >> 2, torch.bitwise_left_shift(1, v.clamp(0, 62))))
    for got, want in zip(fn(x), (x << 3, x >> 2, torch.bitwise_left_shift(1, x.clamp(0, 62)))):
        assert torch.equal(got, want)


@pytest.mark.parametrize("op", [torch.gcd, torch.lcm])
def test_gcd_and_lcm_of_every_int8_pair(op):
    values = torch.arange(-128, 128, dtype=torch.int8)
    a, b = values[:, None].expand(256, 256), values[None, :].expand(256, 256)
    assert torch.equal(compiled(op)(a, b), op(a, b))


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64])
def test_gcd_takes_euclids_longest_path(dtype):
    """Consecutive Fibonacci numbers need the most steps; the largest pair of the dtype needs
    every unrolled step; multiples of them have a nontrivial gcd."""
    fib = [1, 2]
    while fib[-1] + fib[-2] <= torch.iinfo(dtype).max:
        fib.append(fib[-1] + fib[-2])
    a = torch.tensor([fib[-1], fib[-2], -fib[-1], 6 * fib[-20], 0, 0, 12], dtype=dtype)
    b = torch.tensor([fib[-2], fib[-1], fib[-2], 4 * fib[-21], 0, -5, 18], dtype=dtype)
    for op in (torch.gcd, torch.lcm):
        assert torch.equal(compiled(op)(a, b), op(a, b))


def test_random_int64_pairs_match_eager():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-(2**62), 2**62, (4096,), generator=g)
    b = torch.randint(-(2**31), 2**31, (4096,), generator=g)
    assert torch.equal(compiled(torch.gcd)(a, b * 6), torch.gcd(a, b * 6))
    small = torch.randint(-1000, 1000, (4096,), generator=g)
    assert torch.equal(compiled(torch.lcm)(small, b), torch.lcm(small, b))
