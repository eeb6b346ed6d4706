"""The NKI data types, as NumPy dtypes (``bfloat16`` from ml_dtypes) so that tiles are plain arrays."""

import ml_dtypes
import numpy as np

float32 = np.dtype(np.float32)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
int32 = np.dtype(np.int32)
int16 = np.dtype(np.int16)
int8 = np.dtype(np.int8)
uint32 = np.dtype(np.uint32)
uint8 = np.dtype(np.uint8)
bool_ = np.dtype(np.bool_)


def promote(dtypes: list[np.dtype]) -> np.dtype:
    """The result dtype of an op over tiles of ``dtypes`` (scalars do not take part, so bf16
    tiles times a Python float stay bf16); float32 where NumPy knows no common type (bf16 with
    fp16 or ints)."""
    if not dtypes:
        return float32
    try:
        return np.result_type(*dtypes)
    except TypeError:
        return float32
