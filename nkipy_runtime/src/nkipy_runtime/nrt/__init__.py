"""The Neuron Runtime (NRT) binding: libnrt through ctypes, NRT tensors behind the buffer hooks.

``library`` binds the C API, ``status`` turns its codes into typed errors, ``cores`` maps a rank
to its visible NeuronCores, ``device`` implements the runtime buffer hooks and runs NEFFs, and
``probe`` says what the machine lacks. What only hardware can verify is listed in docs/runtimes.md.

Nothing is imported here eagerly: ``probe`` is the ``nkipy.hardware`` entry point, which torch
reaches in every compiled program, and must not pull in the binding.
"""

from __future__ import annotations

import importlib

_EXPORTS = {"NrtDevice": ".device", "NrtLibrary": ".library"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
