"""The Neuron Runtime (NRT) binding: libnrt through ctypes, NRT tensors behind the buffer hooks.

``library`` binds the C API, ``status`` turns its codes into typed errors, ``cores`` maps a rank
to its visible NeuronCores, ``device`` implements the runtime buffer hooks and runs NEFFs, and
``probe`` says what the machine lacks. What only hardware can verify is listed in docs/runtimes.md.
"""

from .device import NrtDevice
from .library import NrtLibrary

__all__ = ["NrtDevice", "NrtLibrary"]
