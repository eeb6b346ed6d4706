"""The NKI tutorials' tensor-add kernels, shared by the interpreter's and the custom ops' tests."""

import nkipy_ops_nki.nki.language as nl


def tensor_add_kernel(a_input, b_input):
    """One 128 x 512 tile, returned in a new HBM tensor."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]
    iy = nl.arange(512)[None, :]
    nl.store(c_output[ix, iy], value=nl.load(a_input[ix, iy]) + nl.load(b_input[ix, iy]))
    return c_output


def tiled_add_kernel(a_input, b_input, c_output):
    """The SPMD version: each program of a 2-D grid adds its 128 x 512 tile into ``c_output``."""
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 512 + nl.arange(512)[None, :]
    nl.store(c_output[ix, iy], value=nl.load(a_input[ix, iy]) + nl.load(b_input[ix, iy]))
