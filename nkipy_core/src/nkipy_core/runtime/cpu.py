"""The embedded ``cpu`` runtime: executes kernels as generated NumPy code.

Every stage before the hardware runs here, so the whole pipeline is testable on any machine.
It is registered through the same ``nkipy_register_runtimes`` hook as any plugin's runtime
(entry point ``cpu`` of nkipy-core), with the lowest priority: any available device wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..hookspecs import hookimpl
from ..ir import codegen
from ..ir.graph import Kernel
from ..ir.types import TensorType
from .base import CompileOptions, Signature

SOURCE = "kernel.py"


class CpuExecutable:
    def __init__(self, source: str, signature: Signature):
        self.source = source
        self.signature = signature
        self._fn = codegen.load(source, filename=f"<nkipy cpu kernel {hash(source) & 0xFFFF:04x}>")

    def __call__(self, *buffers: np.ndarray) -> Sequence[np.ndarray]:
        with np.errstate(all="ignore"):
            outputs = self._fn(*buffers)
        # A kernel may return an input or a read-only broadcast view; callers own what we return.
        return tuple(
            np.array(o, copy=True) if _borrowed(o, buffers) else np.asarray(o) for o in outputs
        )

    def artifacts(self) -> Mapping[str, bytes]:
        return {SOURCE: self.source.encode()}


def _borrowed(out: np.ndarray, inputs: Sequence[np.ndarray]) -> bool:
    out = np.asarray(out)
    return not out.flags.writeable or any(np.may_share_memory(out, i) for i in inputs)


class CpuRuntime:
    name = "cpu"
    priority = 0

    def available(self) -> tuple[bool, str]:
        return True, ""

    def compile(self, kernel: Kernel, options: CompileOptions) -> CpuExecutable:
        return CpuExecutable(codegen.generate(kernel), Signature.of(kernel))

    def load(self, artifacts: Mapping[str, bytes], signature: Signature, options: CompileOptions) -> CpuExecutable:
        return CpuExecutable(artifacts[SOURCE].decode(), signature)

    def allocate(self, type_: TensorType) -> np.ndarray:
        return np.empty(type_.shape, dtype=type_.dtype.numpy)

    def to_device(self, array: np.ndarray) -> np.ndarray:
        return array

    def to_host(self, buffer: np.ndarray) -> np.ndarray:
        return buffer

    def free(self, buffer: np.ndarray) -> None:
        """Host memory is garbage-collected."""


@hookimpl
def nkipy_register_runtimes(registry) -> None:
    registry.register(CpuRuntime())
