"""``nki.isa``: the engine instructions kernels call directly (the tensor engine's matmul and
transpose)."""

from nkipy_ops_nki.interpreter.matmul import nc_matmul
from nkipy_ops_nki.interpreter.matmul import transpose as nc_transpose

__all__ = ["nc_matmul", "nc_transpose"]
