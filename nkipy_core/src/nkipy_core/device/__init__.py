"""The ``nkipy`` torch device: PrivateUse1 renamed, registered from Python.

``registration`` wires it into torch (names, ``torch.nkipy``, ATen kernels); ``aten`` holds the
ATen kernels of the device; ``eager`` runs ATen ops on device tensors through the op packs. The
device sits on top of the compiler and of the buffer layer (``nkipy_core.buffers.memory``, which maps
tensors to runtime buffers); neither imports it (``device_contract`` holds what they know of it).
Importing this package is cheap: torch's backend autoload imports it inside every
``import torch``.
"""
