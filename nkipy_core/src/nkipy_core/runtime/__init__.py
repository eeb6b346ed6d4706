"""Device runtimes: the interface (``base``) a runtime implements, and the embedded ``cpu`` runtime.

This package's names are the public runtime API that runtime packs (``nkipy-runtime``) and op
packs import; ``base`` and ``cpu`` are its implementation.
"""

from nkipy_core.runtime.base import (
    CompileOptions,
    DeviceArray,
    DeviceStats,
    Executable,
    Runtime,
    Signature,
    contiguous_strides,
    runs_custom_call,
)

__all__ = [
    "CompileOptions",
    "DeviceArray",
    "DeviceStats",
    "Executable",
    "Runtime",
    "Signature",
    "contiguous_strides",
    "runs_custom_call",
]
