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
from .base import CompileOptions, DeviceArray, DeviceStats, Signature
from .communicator import TorchDistributedCommunicator

SOURCE = "kernel.py"


class CpuExecutable:
    def __init__(self, source: str, signature: Signature, communicator: TorchDistributedCommunicator):
        self.source = source
        self.signature = signature
        self._fn = codegen.load(source, filename=f"<nkipy cpu kernel {hash(source) & 0xFFFF:04x}>",
                                communicator=communicator)

    def __call__(self, *arrays: np.ndarray) -> Sequence[np.ndarray]:
        with np.errstate(all="ignore"):
            return self._fn(*arrays)

    def artifacts(self) -> Mapping[str, bytes]:
        return {SOURCE: self.source.encode()}


class CpuRuntime:
    """Device memory is host memory here, but only this class knows it: a buffer is a flat
    ``uint8`` array and a ``DeviceArray`` is a strided NumPy view into it."""

    name = "cpu"
    priority = 0
    hardware = False  # a simulator: torch sees the device as an accelerator only on request
    kernel_collectives = True  # through torch.distributed (runtime/communicator.py)
    host_custom_calls = True  # each through its host function (ir/numpy_support._custom_call)

    def __init__(self) -> None:
        self.stats = DeviceStats()
        #: runs kernels' collectives through torch.distributed; one per runtime, since it keeps
        #: the subgroups it made
        self.communicator = TorchDistributedCommunicator()

    def available(self) -> tuple[bool, str]:
        return True, ""

    def compile(self, kernel: Kernel, options: CompileOptions) -> CpuExecutable:
        return CpuExecutable(codegen.generate(kernel), Signature.of(kernel), self.communicator)

    def load(self, artifacts: Mapping[str, bytes], signature: Signature, options: CompileOptions) -> CpuExecutable:
        return CpuExecutable(artifacts[SOURCE].decode(), signature, self.communicator)

    # -- device memory ---------------------------------------------------------------------

    def allocate(self, nbytes: int) -> np.ndarray:
        buffer = np.empty(nbytes, dtype=np.uint8)
        self.stats.allocate(nbytes)
        return buffer

    def free(self, buffer: np.ndarray) -> None:
        self.stats.free(buffer.nbytes)

    def to_device(self, host: np.ndarray, dst: DeviceArray) -> None:
        self.stats.host_to_device += 1
        self.stats.host_to_device_bytes += dst.nbytes
        np.copyto(_view(dst), host, casting="no")

    def to_host(self, src: DeviceArray) -> np.ndarray:
        self.stats.device_to_host += 1
        self.stats.device_to_host_bytes += src.nbytes
        return _view(src).copy()

    def copy(self, src: DeviceArray, dst: DeviceArray) -> None:
        np.copyto(_view(dst), _view(src), casting="no")

    def run(self, executable: CpuExecutable, inputs: Sequence[DeviceArray]) -> list[DeviceArray]:
        outputs = self.run_host(executable, [_view(a) for a in inputs])
        return [self._adopt(o, t) for o, t in zip(outputs, executable.signature.outputs)]

    def run_host(self, executable: CpuExecutable, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Host arrays in, host arrays out: for the cpu runtime host memory *is* device memory,
        so a graph of CPU tensors needs no staging (the optional fast path of ``Runtime``)."""
        owned: list[np.ndarray] = []
        for out in map(np.asarray, executable(*arrays)):
            # a kernel may return an input, a read-only broadcast, or one value twice (after CSE)
            if not out.flags.writeable or any(np.may_share_memory(out, o) for o in (*arrays, *owned)):
                out = np.array(out, copy=True)
            owned.append(out)
        return owned

    def _adopt(self, result: np.ndarray, type_: TensorType) -> DeviceArray:
        """Make a kernel result (owned, see ``run_host``) a device buffer without copying it."""
        result = np.ascontiguousarray(result.astype(type_.dtype.numpy, copy=False).reshape(type_.shape))
        self.stats.allocate(result.nbytes)
        return DeviceArray.contiguous(result.reshape(-1).view(np.uint8), type_)


def _view(array: DeviceArray) -> np.ndarray:
    dtype = array.dtype.numpy
    return np.ndarray(
        array.shape, dtype, buffer=array.buffer, offset=array.offset * dtype.itemsize,
        strides=tuple(s * dtype.itemsize for s in array.strides),
    )


@hookimpl
def nkipy_register_runtimes(registry) -> None:
    registry.register(CpuRuntime())
