"""What both row-wise kernels accept: 2-D float inputs whose rows fit SBUF as fp32 tiles."""

from __future__ import annotations

import numpy as np

FLOAT_DTYPES = ("float32", "bfloat16", "float16")


def dtype_name(dtype) -> str:
    """'float32' for np.float32, np.dtype('float32') and torch.float32 alike."""
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype).removeprefix("torch.")


def row_wise_support(shape, dtype, max_cols: int) -> str | None:
    """None if a [rows, cols] input with cols <= max_cols can be tiled, else the reason."""
    if len(shape) != 2:
        return f"takes a 2-D [rows, cols] input, got {len(shape)}-D"
    if dtype_name(dtype) not in FLOAT_DTYPES:
        return f"takes {', '.join(FLOAT_DTYPES)}, got {dtype_name(dtype)}"
    if shape[0] == 0 or shape[1] == 0:
        return "empty input"
    if shape[1] > max_cols:
        return f"rows of {shape[1]} elements exceed {max_cols}, the most whose fp32 working tiles fit SBUF"
    return None
