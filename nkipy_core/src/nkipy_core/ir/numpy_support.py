"""Helper functions that generated NumPy code calls.

``codegen`` copies their source into every ``kernel.py`` so a kernel file runs with NumPy and
ml_dtypes alone; the cpu runtime and the tracer's NumPy mode import them from here.
"""

import base64

import numpy as np


def _blob(data, dtype, shape):
    """A large constant, stored in the source as base64 of its row-major bytes."""
    return np.frombuffer(base64.b64decode(data), dtype=dtype).reshape(shape)


def _scatter_add(x, index, updates):
    """``x`` with ``updates`` added at ``index``; repeated indices accumulate."""
    out = np.array(x, copy=True)
    np.add.at(out, index, updates)
    return out


def _scatter_reduce(x, index, updates, ufunc):
    """``x`` with each update combined into its position by ``ufunc`` (``np.maximum``...)."""
    out = np.array(x, copy=True)
    ufunc.at(out, index, updates)
    return out


HELPERS = (_blob, _scatter_add, _scatter_reduce)
