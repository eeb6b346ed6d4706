"""The ``inductor`` runtime: each kernel's NKIPy IR run as torch operations that TorchInductor
compiles into fused loops and oneDNN products on the host.

The cpu runtime pays one NumPy pass per primitive, and XLA on the host cannot write into
torch's memory and multiplies matrices more slowly than oneDNN (``docs/benchmarks.md``). This
runtime runs the same kernels, the IR that goes to Trainium, as fast as inductor runs the graph
they came from: each primitive is its torch operations (``fx.rules``), the kernel one FX graph
(``fx.graph``), compiled by TorchInductor without dynamo (``standalone_compile``), so it also runs
inside a graph dynamo must not trace. An optimizer step's updated tensors are written where
they lie, in the loop that computes them.

A kernel compiles at its first call (TorchInductor specialises on the inputs; its own cache
makes the next process's compile fast). A kernel with a primitive torch has no rule for here, or
with an element type it does not compute with, runs on the cpu runtime; so do device memory and
eager ops on the ``nkipy`` device: only graphs of CPU tensors, through ``run_host``, run here.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nkipy_core import _torch
from nkipy_core.ir import Kernel, numpy_to_torch, torch_to_numpy
from nkipy_core.runtime import CompileOptions, CpuRuntime, Signature

from .fx import rules
from .host_memory import CpuDeviceMemory

log = logging.getLogger("nkipy.runtime.inductor")


class InductorExecutable:
    """A kernel's cpu executable, and its TorchInductor programs once called: one per set of
    outputs written into inputs (``run_host_into``)."""

    def __init__(self, cpu: Any):
        self.cpu = cpu
        self.signature: Signature = cpu.signature
        #: why the kernel runs on the cpu runtime, or ``None``
        self.reason = rules.unsupported(cpu.kernel)
        self.programs: dict[tuple[tuple[int, int], ...], Any] = {}

    @property
    def kernel(self) -> Kernel:
        return self.cpu.kernel

    def artifacts(self) -> Mapping[str, bytes]:
        return self.cpu.artifacts()

    def program(self, writes: tuple[tuple[int, int], ...]) -> Any:
        """The TorchInductor program that writes ``writes``' outputs into their inputs, compiled
        at its first use; ``None`` once TorchInductor has refused the kernel (``reason``)."""
        if writes in self.programs:
            return self.programs[writes]
        from .fx import graph  # loads torch's tracing machinery: at the first compile

        try:
            with _torch.disable_current_modes():  # a graph's first call may run under one
                gm = graph.trace(self.kernel, writes)
                program = _torch.standalone_compile(
                    gm, graph.examples(self.kernel), dynamic_shapes="from_example_inputs"
                )
        except Exception as exc:  # noqa: BLE001 - the cpu runtime runs every kernel
            self.reason = f"TorchInductor: {type(exc).__name__}: {exc}"
            log.warning(
                "nkipy inductor: kernel %s runs on the cpu runtime: %s",
                self.kernel.name,
                self.reason,
            )
            program = None
        self.programs[writes] = program
        return program


class InductorRuntime(CpuDeviceMemory):
    """Kernels of CPU tensors compiled by TorchInductor (see the module's docstring). Opt in
    with ``NKIPY_RUNTIME=inductor``."""

    name = "inductor"
    priority = -5  # never the default: a host runtime for speed, chosen by name
    hardware = False
    kernel_collectives = True  # kernels holding them run on the cpu runtime
    host_custom_calls = True
    device_name = CpuRuntime.device_name

    def __init__(self) -> None:
        self.cpu = CpuRuntime()
        self.stats = self.cpu.stats

    def available(self) -> tuple[bool, str]:
        """TorchInductor compiles its CPU kernels with a C++ compiler."""
        if any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "clang++")):
            return True, ""
        return False, "TorchInductor needs a C++ compiler on PATH (g++, clang++ or $CXX)"

    def describe(self) -> str:
        return "NKIPy kernels as torch operations compiled by TorchInductor; the rest on cpu"

    def compile(self, kernel: Kernel, options: CompileOptions) -> InductorExecutable:
        executable = InductorExecutable(self.cpu.compile(kernel, options))
        if executable.reason:
            log.info(
                "nkipy inductor: kernel %s runs on the cpu runtime: %s",
                kernel.name,
                executable.reason,
            )
        return executable

    def load(
        self, artifacts: Mapping[str, bytes], signature: Signature, options: CompileOptions
    ) -> InductorExecutable:
        return InductorExecutable(self.cpu.load(artifacts, signature, options))

    # -- graphs of CPU tensors --------------------------------------------------------------

    def run_host(
        self, executable: InductorExecutable, arrays: Sequence[np.ndarray]
    ) -> list[np.ndarray]:
        if executable.reason:
            return self.cpu.run_host(executable.cpu, arrays)
        return self._run(executable, arrays, ())

    def run_host_into(
        self,
        executable: InductorExecutable,
        arrays: Sequence[np.ndarray],
        writes: Sequence[tuple[int, int]],
    ) -> list[np.ndarray]:
        """``run_host`` leaving each result ``k`` of ``writes`` in ``arrays[j]``, written there
        by the compiled loop that computes it."""
        if executable.reason:
            return self.cpu.run_host_into(executable.cpu, arrays, writes)
        return self._run(executable, arrays, tuple(writes))

    def _run(
        self,
        executable: InductorExecutable,
        arrays: Sequence[np.ndarray],
        writes: tuple[tuple[int, int], ...],
    ) -> list[np.ndarray]:
        # the programs are specialised on row-major inputs: a strided view is copied (rare: a
        # kernel call passes its inputs in their memory order)
        tensors = [
            numpy_to_torch(a if a.flags.c_contiguous else np.ascontiguousarray(a)) for a in arrays
        ]
        if writes and any(tensors[j].data_ptr() != _address(arrays[j]) for _, j in writes):
            return self.cpu.run_host_into(executable.cpu, arrays, writes)  # a copy: not in place
        program = executable.program(writes)
        if program is None:
            return self.cpu.run_host_into(executable.cpu, arrays, writes)
        results = iter(program(*tensors))
        into = dict(writes)
        inputs = {t.untyped_storage().data_ptr() for t in tensors}
        out: list[np.ndarray] = []
        for k in range(len(executable.signature.outputs)):
            if k in into:
                out.append(arrays[into[k]])
                continue
            t = next(results)
            if t.untyped_storage().data_ptr() in inputs or (0 in t.stride() and t.numel() > 1):
                t = t.contiguous().clone()  # memory of its own, one element per position
            inputs.add(t.untyped_storage().data_ptr())
            out.append(torch_to_numpy(t))
        return out


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]
