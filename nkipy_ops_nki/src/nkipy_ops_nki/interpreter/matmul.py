"""Matrix multiplication and transposition on the tensor (PE) engine.

The engine contracts over the partition dimension: the stationary operand [K, M] and the moving
operand [K, N] both hold K on partitions, and the [M, N] result lands in PSUM in fp32. Hence the
limits: K <= 128 partitions, M <= 128 stationary columns, N <= 512 moving columns.
"""

from __future__ import annotations

import numpy as np

from nkipy_ops_nki.errors import NKIError, NKILimitError
from nkipy_ops_nki.interpreter.indexing import mask_values
from nkipy_ops_nki.interpreter.limits import GEMM_MOVING_FREE, GEMM_STATIONARY_FREE, PARTITIONS
from nkipy_ops_nki.interpreter.location import kernel_error
from nkipy_ops_nki.interpreter.tiles import Tensor, psum, sbuf, values


def _matrix(x, role: str) -> np.ndarray:
    array = values(x).astype(np.float32)
    if array.ndim != 2:
        raise kernel_error(
            NKIError, f"the {role} operand of a matmul must be a 2-D tile, not {array.shape}"
        )
    return array


def nc_matmul(stationary, moving, mask=None) -> Tensor:
    """``nisa.nc_matmul``: stationary [K, M] and moving [K, N] give stationary.T @ moving, [M, N]
    in PSUM (fp32)."""
    a, b = _matrix(stationary, "stationary"), _matrix(moving, "moving")
    (k, m), (k2, n) = a.shape, b.shape
    for size, limit, what, fix in (
        (
            k,
            PARTITIONS,
            "contraction dimension K",
            "nl.tile_size.pmax; split K into blocks "
            "of 128 and accumulate their products in one psum tile (acc += ...)",
        ),
        (
            m,
            GEMM_STATIONARY_FREE,
            "stationary free dimension M",
            "nl.tile_size.gemm_stationary_fmax; compute the output in blocks of 128 rows",
        ),
        (
            n,
            GEMM_MOVING_FREE,
            "moving free dimension N",
            "nl.tile_size.gemm_moving_fmax; compute the output in blocks of 512 columns",
        ),
    ):
        if size > limit:
            raise kernel_error(
                NKILimitError, f"matmul {what} is {size}, over its limit of {limit} ({fix})"
            )
    if k != k2:
        raise kernel_error(
            NKIError,
            f"matmul contraction sizes differ: stationary [K={k}, M={m}], moving [K={k2}, N={n}]",
        )
    result = a.T @ b
    if mask is not None:
        result = np.where(mask_values(mask), result, 0)
    return Tensor(result.astype(np.float32), psum)


def matmul(x, y, transpose_x: bool = False, mask=None) -> Tensor:
    """``nl.matmul``: x [M, K] @ y [K, N], [M, N] in PSUM; ``transpose_x=True`` takes x as [K, M]."""
    stationary = x if transpose_x else _matrix(x, "x").T
    return nc_matmul(stationary, y, mask=mask)


def transpose(x, dtype=None, mask=None) -> Tensor:
    """``nl.transpose`` of a 2-D tile; both sizes must fit the engine (<= 128)."""
    array = values(x)
    if array.ndim != 2:
        raise kernel_error(NKIError, f"nl.transpose takes a 2-D tile, got shape {array.shape}")
    if max(array.shape) > PARTITIONS:
        raise kernel_error(
            NKILimitError,
            f"nl.transpose of a tile of shape {array.shape}: both sizes must be at most "
            f"nl.tile_size.pmax ({PARTITIONS}); transpose it in 128x128 blocks",
        )
    result = array.T
    if mask is not None:
        result = np.where(mask_values(mask), result, 0)
    return Tensor(result.astype(dtype or array.dtype), sbuf)
