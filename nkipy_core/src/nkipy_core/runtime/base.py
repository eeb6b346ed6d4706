"""What a device runtime is: the interface the core compiles and runs kernels through.

Runtimes are registered by plugins (``nkipy_register_runtimes``). The core's ``cpu`` runtime is
one of them; ``nrt`` (Trainium) and ``xla`` come from ``nkipy-runtime``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np

from ..ir.graph import Kernel
from ..ir.types import TensorType


@attrs.frozen
class CompileOptions:
    """What a runtime may use to compile a kernel; part of the cache key."""

    compiler_args: str = ""
    rank: int = 0
    world_size: int = 1


@attrs.frozen
class Signature:
    """The input and output types of an executable, stored beside its artifacts in the cache."""

    inputs: tuple[TensorType, ...] = attrs.field(converter=tuple)
    outputs: tuple[TensorType, ...] = attrs.field(converter=tuple)

    @classmethod
    def of(cls, kernel: Kernel) -> Signature:
        return cls(kernel.input_types, kernel.output_types)


@runtime_checkable
class Executable(Protocol):
    """A compiled kernel. Called with device buffers, returns device buffers."""

    signature: Signature

    def __call__(self, *buffers: Any) -> Sequence[Any]: ...

    def artifacts(self) -> Mapping[str, bytes]:
        """Files that ``Runtime.load`` needs to rebuild this executable in a new process."""
        ...


@runtime_checkable
class Runtime(Protocol):
    """A device runtime. ``priority`` orders the default choice among available runtimes."""

    name: str
    priority: int

    def available(self) -> tuple[bool, str]:
        """(True, "") or (False, what is missing and how to get it)."""
        ...

    def compile(self, kernel: Kernel, options: CompileOptions) -> Executable: ...

    def load(self, artifacts: Mapping[str, bytes], signature: Signature, options: CompileOptions) -> Executable: ...

    def allocate(self, type_: TensorType) -> Any: ...

    def to_device(self, array: np.ndarray) -> Any: ...

    def to_host(self, buffer: Any) -> np.ndarray: ...

    def free(self, buffer: Any) -> None: ...
