"""A NumPy interpreter of the NKI language: kernels written for ``neuronxcc.nki.language`` run
on the CPU, one program of the launch grid after another, with the hardware's tile limits
checked and reported at the kernel line that breaks them.

Kernels import the language from :mod:`nkipy_ops_nki.nki`; this package holds its implementation
and the entry point :func:`run`.
"""

from nkipy_ops_nki.interpreter.launch import SpmdDim, run

__all__ = ["SpmdDim", "run"]
