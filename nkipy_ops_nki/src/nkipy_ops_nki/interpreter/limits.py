"""Hardware limits of a NeuronCore (trn2) that kernels must respect, as named constants, and the
checks every on-chip tile goes through when it is created."""

from __future__ import annotations

import math

import attrs
import numpy as np

from nkipy_ops_nki.errors import NKILimitError
from nkipy_ops_nki.interpreter.location import kernel_error

PARTITIONS = 128
"""SBUF and PSUM have 128 partitions: the first dimension of an on-chip tile."""
PSUM_FREE_ELEMENTS = 512
"""One PSUM bank holds 2 KiB per partition: 512 fp32 accumulators."""
SBUF_BYTES_PER_PARTITION = 196608
"""trn2 SBUF: 24 MiB over 128 partitions, 192 KiB each."""
GEMM_STATIONARY_FREE = 128
"""The stationary matmul operand (the one loaded into the PE array) has at most 128 columns."""
GEMM_MOVING_FREE = 512
"""The moving matmul operand streams at most 512 columns (one PSUM bank of results)."""


@attrs.frozen
class TileSize:
    """``nl.tile_size``: the limits under the names NKI kernels use."""

    pmax: int = PARTITIONS
    psum_fmax: int = PSUM_FREE_ELEMENTS
    gemm_stationary_fmax: int = GEMM_STATIONARY_FREE
    gemm_moving_fmax: int = GEMM_MOVING_FREE


tile_size = TileSize()


def check_tile(shape: tuple[int, ...], dtype: np.dtype, buffer: str) -> None:
    """Raise NKILimitError if an SBUF/PSUM tile of ``shape`` cannot exist on the chip."""
    if not shape:
        return
    partitions, free = shape[0], math.prod(shape[1:])
    if partitions > PARTITIONS:
        raise kernel_error(
            NKILimitError,
            f"partition dimension {partitions} of a {buffer} tile of shape {shape} exceeds "
            f"nl.tile_size.pmax ({PARTITIONS}); tile the partition dimension in blocks of "
            f"nl.tile_size.pmax ({PARTITIONS})",
        )
    if buffer == "psum" and free > PSUM_FREE_ELEMENTS:
        raise kernel_error(
            NKILimitError,
            f"psum tile of shape {shape} has {free} elements per partition, over "
            f"nl.tile_size.psum_fmax ({PSUM_FREE_ELEMENTS}); tile the free dimension in blocks of "
            f"{PSUM_FREE_ELEMENTS}",
        )
    if buffer == "sbuf" and free * np.dtype(dtype).itemsize > SBUF_BYTES_PER_PARTITION:
        raise kernel_error(
            NKILimitError,
            f"sbuf tile of shape {shape} ({np.dtype(dtype).name}) needs "
            f"{free * np.dtype(dtype).itemsize} bytes per partition: free size over its limit of "
            f"{SBUF_BYTES_PER_PARTITION} bytes (192 KiB); tile the free dimension into smaller blocks",
        )
