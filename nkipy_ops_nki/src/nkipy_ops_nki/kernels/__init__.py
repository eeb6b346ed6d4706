"""NKI-language kernels of this pack, each with ``supports(shape, dtype)`` saying whether it tiles
an input (None) or why not (so an override can decline and fall back)."""
