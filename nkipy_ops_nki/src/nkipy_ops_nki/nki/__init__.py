"""The NKI language, interpreted with NumPy: ``import nkipy_ops_nki.nki.language as nl`` where a
Neuron kernel imports ``neuronxcc.nki.language as nl`` (and ``nkipy_ops_nki.nki.isa as nisa``).

``nki.jit`` makes a kernel launchable as Neuron's does: ``kernel(a, b)`` or ``kernel[gx, gy](a, b, out)``
on NumPy arrays or torch tensors (``nkipy_ops_nki.NKIKernel``).
"""

from nkipy_ops_nki.kernel import NKIKernel as jit
from nkipy_ops_nki.nki import isa, language

__all__ = ["isa", "jit", "language"]
