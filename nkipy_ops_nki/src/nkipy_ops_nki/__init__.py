"""nkipy-ops-nki: NKI kernels as torch ops and as overrides of ATen ops.

``NKIOpRegistry.register(op)`` ties an NKI kernel to a torch custom op; ``nki_op`` makes the custom
op from a kernel in one step. Kernels are written against ``nkipy_ops_nki.nki.language`` (the API of
``neuronxcc.nki.language``) and run here on a NumPy interpreter.
"""

from .custom_op import nki_op
from .errors import NKIError, NKIIndexError, NKILimitError
from .kernel import NKIKernel
from .registry import NKIOpRegistry

__all__ = ["NKIError", "NKIIndexError", "NKIKernel", "NKILimitError", "NKIOpRegistry", "nki_op"]
