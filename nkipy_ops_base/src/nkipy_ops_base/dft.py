"""Discrete Fourier transforms as matrix products, on complex numbers carried as real pairs.

No IR primitive computes an FFT, but a DFT along one axis is a matrix product, and matrix
products are what Trainium's tensor engine does best. A transform of length ``n`` multiplies the
signal (its real and imaginary parts interleaved, as pairs are laid out) by a ``2n x 2n`` real
matrix of cosines and sines. Those are computed on the host in f64 from the exact residue
``j·k mod n`` (so the angle never loses precision to a large product) and rounded once to the
signal's dtype; entries that are exactly 0 or ±1 (quarter turns) are made exact. Each output is
then a dot product of length ``2n``: its rounding error grows like ``sqrt(n)·eps``, as a
floating-point FFT's grows like ``log(n)·eps``.

A direct transform costs ``O(n²)`` per signal and its matrix ``(2n)²`` constants, so a length
above ``DIRECT`` is split Cooley-Tukey style: ``n = n1·n2`` (``n1`` the divisor nearest
``sqrt(n)``) becomes transforms of length ``n1`` along one axis of the signal reshaped to
``(n1, n2)``, a product by twiddle factors ``exp(±2πi·k1·j2/n)`` and transforms of length ``n2``
along the other, each split again if still too long. Per element that costs ``O(n1 + n2)``
instead of ``O(n)``, and the error stays that of the short transforms. A length with a prime
factor above ``MAX_FACTOR`` cannot be split below it and is declined: its direct matrix would
hold over 4 Mi constants (16 MiB in f32) and cost over 2048 multiply-adds per output. Lengths
are not otherwise bounded: a split transform of length ``n`` holds ``O(n)`` constants.

Real transforms (``r2c``: a real signal, ``c2r``: a Hermitian one given by its first half) have
their own direct matrices, which skip the zero imaginary parts; past ``DIRECT`` they go through
the complex split: ``r2c`` gives the signal zero imaginary parts and keeps the first outputs,
and ``c2r`` weighs the half spectrum (1 for the zero and Nyquist frequencies, 2 for the others,
whose conjugates it stands for) and keeps the real part of the inverse transform. The imaginary
parts of the zero and Nyquist frequencies are ignored, as pocketfft's ``c2r`` ignores them.
"""

from __future__ import annotations

import math

import numpy as np

from nkipy_core import knp
from nkipy_core.errors import Unsupported

from . import complex_pairs

#: lengths up to this are transformed by one matrix product; longer ones are split
DIRECT = 256
#: the longest transform a matrix may still do directly (a prime length up to this)
MAX_FACTOR = 1024


def _cos_sin(rows: int, cols: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``cos`` and ``sin`` of ``2π·j·k/n`` for ``j < rows``, ``k < cols``, in f64, with the
    multiples of a quarter turn exact."""
    residue = np.outer(np.arange(rows), np.arange(cols)) % n
    angle = 2 * np.pi * residue / n
    cos, sin = np.cos(angle), np.sin(angle)
    quarter = (4 * residue) % n == 0
    cos[quarter], sin[quarter] = np.round(cos[quarter]), np.round(sin[quarter])
    return cos, sin


def _along(x, axis: int, matrix: np.ndarray, pair_in: bool, pair_out: bool):
    """``x`` with its ``axis`` (a signal axis, not the pair axis) multiplied by ``matrix``:
    the axis is moved last (before the pair axis), flattened with it, multiplied and put back."""
    rank = x.ndim - pair_in
    rest = [d for d in range(rank) if d != axis]
    moved = knp.transpose(x, [*rest, axis, *([rank] if pair_in else [])])
    lead = [x.shape[d] for d in rest]
    flat = knp.reshape(moved, (math.prod(lead), matrix.shape[0]))
    product = knp.matmul(flat, np.asarray(matrix, knp.dtype_of(x).numpy))
    length = matrix.shape[1] // (2 if pair_out else 1)
    product = knp.reshape(product, [*lead, length, *([2] if pair_out else [])])
    order = list(range(len(rest)))
    order.insert(axis, len(rest))
    return knp.transpose(product, order + ([len(rest) + 1] if pair_out else []))


def check_length(n: int) -> None:
    """Decline a length with a prime factor above ``MAX_FACTOR``: no split brings it lower."""
    rest, factor, largest = n, 2, 1
    while factor * factor <= rest:
        while rest % factor == 0:
            largest, rest = factor, rest // factor
        factor += 1
    largest = max(largest, rest)
    if largest > MAX_FACTOR:
        raise Unsupported(
            f"a DFT of length {n}, whose prime factor {largest} > {MAX_FACTOR} no split reduces: "
            f"a matrix product of that length costs {largest} multiply-adds per output and "
            f"{(2 * largest) ** 2} constants"
        )


def _split(n: int) -> int:
    """The divisor of ``n`` nearest ``sqrt(n)`` from below (1 for a prime)."""
    return next(d for d in range(math.isqrt(n), 0, -1) if n % d == 0)


def c2c(x, axis: int, sign: int, scale: float):
    """The transform ``scale · Σ_j x_j exp(sign·2πi·j·k/n)`` of pairs ``x`` along ``axis``."""
    n = x.shape[axis]
    check_length(n)
    n1 = _split(n) if n > DIRECT else 1
    if n1 == 1:
        cos, sin = _cos_sin(n, n, n)
        matrix = np.empty((n, 2, n, 2))
        matrix[:, 0, :, 0], matrix[:, 0, :, 1] = cos, sign * sin
        matrix[:, 1, :, 0], matrix[:, 1, :, 1] = -sign * sin, cos
        return _along(x, axis, scale * matrix.reshape(2 * n, 2 * n), True, True)
    # j = n2·j1 + j2 and k = k1 + n1·k2: transform j1 -> k1, twiddle, transform j2 -> k2
    n2 = n // n1
    shape = list(x.shape)
    x = knp.reshape(x, [*shape[:axis], n1, n2, *shape[axis + 1 :]])
    x = c2c(x, axis, sign, scale)
    cos, sin = _cos_sin(n1, n2, n)
    twiddle = np.stack([cos, sign * sin], axis=-1).reshape(
        n1, n2, *[1] * (len(shape) - axis - 2), 2
    )
    x = complex_pairs.multiply(x, np.asarray(twiddle, knp.dtype_of(x).numpy))
    x = c2c(x, axis + 1, sign, 1.0)
    order = list(range(x.ndim))
    order[axis], order[axis + 1] = axis + 1, axis
    return knp.reshape(knp.transpose(x, order), shape)


def r2c(x, axis: int, length: int, scale: float):
    """The forward transform of real ``x`` along ``axis``, its first ``length`` outputs as pairs."""
    n = x.shape[axis]
    if n > DIRECT:
        full = c2c(complex_pairs.pair(x, False, knp.dtype_of(x)), axis, -1, scale)
        return full[(slice(None),) * axis + (slice(0, length),)]
    cos, sin = _cos_sin(n, length, n)
    matrix = np.stack([cos, -sin], axis=-1).reshape(n, 2 * length)
    return _along(x, axis, scale * matrix, False, True)


def _hermitian_weights(rows: int, n: int) -> np.ndarray:
    """How often each of the first ``rows`` frequencies counts in a real signal of length ``n``:
    once for zero and Nyquist, twice for the others (their conjugates), never past ``n // 2``."""
    j = np.arange(rows)
    return np.where((j == 0) | (2 * j == n), 1.0, np.where(j <= n // 2, 2.0, 0.0))


def c2r(x, axis: int, n: int, scale: float):
    """The real inverse transform of length ``n`` along ``axis`` of the Hermitian signal whose
    first frequencies are the pairs ``x``."""
    rows = x.shape[axis]
    weights = scale * _hermitian_weights(rows, n)
    if n > DIRECT:
        keep = min(rows, n // 2 + 1)
        x = x[(slice(None),) * axis + (slice(0, keep),)]
        trailing = [1] * (x.ndim - axis - 1)
        x = knp.multiply(
            x, np.asarray(weights[:keep].reshape(keep, *trailing), knp.dtype_of(x).numpy)
        )
        pad = [(0, 0)] * x.ndim
        pad[axis] = (0, n - keep)
        return c2c(knp.pad(x, pad), axis, 1, 1.0)[..., complex_pairs.REAL]
    cos, sin = _cos_sin(rows, n, n)
    matrix = np.stack([cos, -sin], axis=1).reshape(2 * rows, n)
    return _along(x, axis, np.repeat(weights, 2)[:, None] * matrix, True, False)
