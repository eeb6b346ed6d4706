"""The NKI language, interpreted with NumPy: ``import nkipy_ops_nki.nki.language as nl`` where a
Neuron kernel imports ``neuronxcc.nki.language as nl`` (and ``nkipy_ops_nki.nki.isa as nisa``)."""

from nkipy_ops_nki.nki import isa, language

__all__ = ["isa", "language"]
