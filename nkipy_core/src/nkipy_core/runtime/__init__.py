"""Device runtimes: the interface (``base``) a runtime implements, and the embedded ``cpu`` runtime.

This package's names are the public runtime API that runtime packs (``nkipy-runtime``) and op
packs import; ``base`` and ``cpu`` are its implementation. ``CpuRuntime`` is public so that a
runtime may be built on it (``nkipy-runtime``'s ``auto`` runs kernels on it and on ``xla``).
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
from nkipy_core.runtime.cpu import CpuRuntime

__all__ = [
    "CompileOptions",
    "CpuRuntime",
    "DeviceArray",
    "DeviceStats",
    "Executable",
    "Runtime",
    "Signature",
    "contiguous_strides",
    "runs_custom_call",
]
