"""The ``nkipy`` torch device: PrivateUse1 renamed, registered from Python.

``registration`` wires it into torch (names, ``torch.nkipy``, ATen kernels); ``memory`` maps
tensors to runtime buffers; ``aten`` holds the ATen kernels of the device; ``eager`` runs ATen
ops on device tensors through the op packs. Importing this package is cheap: torch's backend
autoload imports it inside every ``import torch``.
"""

#: the device's name in torch (``torch.device("nkipy")``, ``torch.nkipy``)
NAME = "nkipy"
