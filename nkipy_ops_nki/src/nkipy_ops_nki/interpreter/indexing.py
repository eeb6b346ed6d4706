"""Index grids, masks, and turning a subscript into the element coordinates it touches.

``nl.arange(n)[:, None]`` and ``nl.arange(m)[None, :]`` are integer arrays that broadcast into an
(n, m) grid, exactly as NumPy's advanced indexing; affine arithmetic on them (``i * 128 + ix``)
stays an index, and comparisons of indices are masks. Every subscript (ints, slices, ``...``,
index grids) becomes one integer array per tensor dimension, all of one broadcast shape: the
shape of the tile it reads or writes.
"""

from __future__ import annotations

import operator

import numpy as np

from nkipy_ops_nki.errors import NKIError, NKIIndexError
from nkipy_ops_nki.interpreter.location import kernel_error


def _lift(op, reflected=False):
    def method(self, other):
        a, b = self.array, other.array if isinstance(other, Index) else other
        result = op(b, a) if reflected else op(a, b)
        return (Mask if result.dtype == np.bool_ else Index)(result)

    return method


class Index:
    """An integer index grid (``nl.arange``, ``nl.mgrid``) and affine expressions of it."""

    def __init__(self, array: np.ndarray):
        self.array = np.asarray(array)

    def __getitem__(self, key):
        return Index(self.array[key])

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    __add__, __radd__ = _lift(operator.add), _lift(operator.add, True)
    __sub__, __rsub__ = _lift(operator.sub), _lift(operator.sub, True)
    __mul__, __rmul__ = _lift(operator.mul), _lift(operator.mul, True)
    __floordiv__, __mod__ = _lift(operator.floordiv), _lift(operator.mod)
    __lt__, __le__ = _lift(operator.lt), _lift(operator.le)
    __gt__, __ge__ = _lift(operator.gt), _lift(operator.ge)
    __eq__, __ne__ = _lift(operator.eq), _lift(operator.ne)  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Index(shape={self.shape})"


class Mask:
    """A boolean predicate over an index grid: where a load, store or op takes effect."""

    def __init__(self, array: np.ndarray):
        self.array = np.asarray(array, dtype=bool)

    def __and__(self, other):
        return Mask(self.array & mask_values(other))

    def __or__(self, other):
        return Mask(self.array | mask_values(other))

    def __invert__(self):
        return Mask(~self.array)

    __rand__, __ror__ = __and__, __or__

    def __bool__(self):
        raise kernel_error(NKIError, "a mask has no truth value at trace time; pass it as mask=")


def mask_values(mask) -> np.ndarray:
    return mask.array if isinstance(mask, Mask) else np.asarray(mask, dtype=bool)


def arange(*bounds: int) -> Index:
    """``nl.arange(n)`` / ``nl.arange(start, stop)``: a 1-D index, to be given axes with None."""
    return Index(np.arange(*bounds))


class _MGrid:
    """``nl.mgrid[0:128, 0:512]``: one index per dimension, broadcasting into the full grid."""

    def __getitem__(self, key) -> tuple[Index, ...]:
        return tuple(Index(a) for a in np.ogrid[key])


mgrid = _MGrid()


def coordinates(index, shape: tuple[int, ...]) -> list[np.ndarray]:
    """One integer array per dimension of a tensor of ``shape``, all broadcast to one shape.

    Slices are not clipped as Python would: reaching past the end is reported, not hidden.
    """
    index = index if isinstance(index, tuple) else (index,)
    ellipses = [at for at, k in enumerate(index) if k is Ellipsis]
    if len(ellipses) > 1:
        raise kernel_error(NKIError, "an index can have only one '...'")
    if ellipses:
        at = ellipses[0]
        index = index[:at] + (slice(None),) * (len(shape) - len(index) + 1) + index[at + 1 :]
    index = index + (slice(None),) * (len(shape) - len(index))
    if len(index) > len(shape):
        raise kernel_error(NKIError, f"{len(index)} indices for a tensor of shape {shape}")
    kept = [k for k in index if not isinstance(k, (int, np.integer))]
    rank = max([k.array.ndim for k in kept if isinstance(k, Index)] + [len(kept)])
    arrays, axis = [], 0
    for k, size in zip(index, shape):
        if isinstance(k, slice):
            start, stop, step = k.start, k.stop, k.step or 1
            start = 0 if start is None else start + size * (start < 0)
            stop = size if stop is None else stop + size * (stop < 0)
            line = np.arange(start, stop, step)
            arrays.append(line.reshape([-1 if d == axis else 1 for d in range(rank)]))
            axis += 1
        elif isinstance(k, Index):
            arrays.append(k.array)
            axis += 1
        elif isinstance(k, (int, np.integer)):
            arrays.append(np.asarray(k))
        else:
            raise kernel_error(
                NKIError, f"cannot index with {k!r}: use ints, slices, ... or nl.arange grids"
            )
    return list(np.broadcast_arrays(*arrays))


def check_bounds(coords: list[np.ndarray], shape: tuple[int, ...], mask: np.ndarray | None) -> None:
    """Raise NKIIndexError if any unmasked coordinate lies outside ``shape``."""
    for dim, (c, size) in enumerate(zip(coords, shape)):
        live = c if mask is None else c[mask]
        if live.size and (live.min() < 0 or live.max() >= size):
            raise kernel_error(
                NKIIndexError,
                f"index {live.min()}..{live.max()} of dimension {dim} is outside the tensor of "
                f"shape {shape} (valid 0..{size - 1}); stop the tile at the edge or pass "
                f"mask= (e.g. mask=(i * 128 + ix < {size})) so the rows past the end are skipped",
            )
