"""Kernels traced from knp functions, for the tests of the IR and its NumPy code."""

from nkipy_core.ir import KernelBuilder, verify
from nkipy_core.ir.passes import simplify


def trace(fn, *types):
    """The simplified, verified kernel of ``fn`` over parameters of ``types``."""
    builder = KernelBuilder("k")
    params = [builder.param(t) for t in types]
    with builder.building("test"):
        out = fn(*params)
    kernel = simplify(builder.finish(out if isinstance(out, tuple) else (out,)))
    verify(kernel)
    return kernel
