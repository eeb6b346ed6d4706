"""What the host runtimes that choose how kernels of CPU tensors run (``auto``, ``inductor``)
leave to the ``cpu`` runtime: device memory, and kernels on the ``nkipy`` device."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nkipy_core.runtime import CpuRuntime, DeviceArray


class CpuDeviceMemory:
    """Device memory and device kernels through ``self.cpu``, a ``CpuRuntime``: the buffers of the
    ``nkipy`` device are host arrays as the ``cpu`` runtime makes them, and a kernel run on them
    (``run``, ``run_into``) is its executable's ``cpu`` one."""

    cpu: CpuRuntime

    def allocate(self, nbytes: int) -> Any:
        return self.cpu.allocate(nbytes)

    def free(self, buffer: Any) -> None:
        self.cpu.free(buffer)

    def memory_info(self) -> tuple[int, int]:
        return self.cpu.memory_info()

    def to_device(self, host: np.ndarray, dst: DeviceArray) -> None:
        self.cpu.to_device(host, dst)

    def to_host(self, src: DeviceArray) -> np.ndarray:
        return self.cpu.to_host(src)

    def to_host_into(self, src: DeviceArray, dst: np.ndarray) -> None:
        self.cpu.to_host_into(src, dst)

    def copy(self, src: DeviceArray, dst: DeviceArray) -> None:
        self.cpu.copy(src, dst)

    def run(self, executable: Any, inputs: Sequence[DeviceArray]) -> list[DeviceArray]:
        return self.cpu.run(executable.cpu, inputs)

    def run_into(
        self, executable: Any, inputs: Sequence[DeviceArray], outputs: Sequence[DeviceArray]
    ) -> None:
        self.cpu.run_into(executable.cpu, inputs, outputs)
