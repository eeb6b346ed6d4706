"""The buffer layer: tensors on the ``nkipy`` device and the runtime buffers under them.

Below the compiler and the device: kernel calls hand it tensors, the device registers its
first-use work with it (``device_contract``) instead of being imported by it.
"""
