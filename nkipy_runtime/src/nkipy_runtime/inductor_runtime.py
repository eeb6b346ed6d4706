"""The ``inductor`` runtime: each kernel's NKIPy IR run as torch operations that TorchInductor
compiles into fused loops and oneDNN products on the host.

The cpu runtime pays one NumPy pass per primitive, and XLA on the host cannot write into
torch's memory and allocates its results anew at every call (``docs/benchmarks.md``). This
runtime runs the same kernels, the IR that goes to Trainium, as fast as inductor runs the graph
they came from: each primitive is its torch operations (``fx.rules``), the kernel one FX graph
of ATen operations (``fx.graph``), compiled by TorchInductor without dynamo or AOTAutograd
(``compile_fx_forward``, as AOTAutograd's inference path compiles a graph), so it also runs
inside a graph dynamo must not trace, and is called without wrappers around TorchInductor's
code: the kernel call's caller has AOTAutograd's wrapper or stands in for it. An optimizer
step's updated tensors are written where they lie, in the loop that computes them.

A kernel compiles at its first call (TorchInductor specialises on the inputs; its own cache
makes the next process's compile fast). A kernel with a primitive torch has no rule for here, or
with an element type it does not compute with, runs on the cpu runtime; so do device memory and
eager ops on the ``nkipy`` device: only graphs of CPU tensors, through ``run_host``, run here.
"""

from __future__ import annotations

import logging
import operator
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from nkipy_core import _torch
from nkipy_core.ir import Kernel, numpy_to_torch, torch_to_numpy
from nkipy_core.runtime import CompileOptions, CpuRuntime, Signature

from .fx import rules
from .host_memory import CpuDeviceMemory

log = logging.getLogger("nkipy.runtime.inductor")


class Program:
    """A TorchInductor program of a kernel, and which of its results it returns other than as
    row-major memory of their own: in an input's memory or an earlier result's, as one element
    for several positions (a 0 stride), or in another layout (TorchInductor follows its
    operands' strides; a call returns row-major results, as torch lays out a graph's new
    tensors). The program is specialised on its inputs' shapes and strides, so which results
    those are is the same at every call: learnt at the first (``shared``)."""

    __slots__ = ("compiled", "shared", "writes", "_gather")

    def __init__(self, compiled: Any, writes: tuple[tuple[int, int], ...]):
        self.compiled = compiled
        #: per result, whether it is copied (see the class docstring): ``None`` before the first
        #: call, ``()`` once learnt that none is
        self.shared: tuple[bool, ...] | None = None
        #: (output, input) pairs, by output: the outputs the program leaves in its inputs
        self.writes = tuple(sorted(writes))
        self._gather: Callable[[list], Sequence[torch.Tensor]] | None = None

    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The results of the program on ``inputs``, each a tensor of its own; an output it
        leaves in an input is that input. It runs without gradients, as AOTAutograd's wrapper
        ran it: its products are ATen's ``out=`` ones, which refuse an input that requires grad
        while grad mode is on, and its results are values, not steps to differentiate (a kernel
        call in a graph that needs gradients is inside AOTAutograd's autograd function)."""
        if torch.is_grad_enabled():
            with torch.no_grad():
                results = self.compiled(list(inputs))
        else:
            results = self.compiled(list(inputs))
        shared = self.shared
        if shared is None:
            shared = self.shared = _shared(inputs, results)
            self._gather = _gather(self.writes, len(results))
        if shared:
            results = [
                torch.clone(t, memory_format=torch.contiguous_format) if s else t
                for t, s in zip(results, shared)
            ]
        if self._gather is None:
            return results
        return list(self._gather([*results, *inputs]))


def _compiled(kernel: Kernel, writes: tuple[tuple[int, int], ...]) -> Any:
    """TorchInductor's program of ``kernel``'s FX graph (``graph.trace``), compiled as
    AOTAutograd's inference path compiles a forward graph, without AOTAutograd: the graph is
    already what that path would trace (ATen operations, decomposed, an input's update a
    ``copy_`` into it), and its results come back in the strides they were traced with. Called
    with its inputs as one list."""
    from .fx import graph  # loads torch's tracing machinery: at the first compile

    gm = graph.trace(kernel, writes)
    examples = graph.examples(kernel)
    outputs = len(kernel.outputs) - len(writes)
    return _torch.compile_fx_forward(
        gm,
        examples,
        num_orig_model_outputs=outputs,
        num_example_inputs=len(examples),
        compiler_config_extra=_torch.create_compiler_config_extra(gm),
        is_inference=True,
    )


def _gather(
    writes: tuple[tuple[int, int], ...], results: int
) -> Callable[[list], Sequence[torch.Tensor]] | None:
    """What picks a call's outputs out of its ``results`` results followed by its inputs: output
    ``k`` of each pair ``(k, j)`` of ``writes`` is input ``j``, the others are the results in
    order. One C-level pass (``itemgetter``), where inserting the written inputs into the
    results one by one cost a compiled optimizer step writing 84 tensors 10 µs a call. ``None``
    without writes: the outputs are the results."""
    if not writes:
        return None
    written = dict(writes)
    positions, taken = [], 0
    for k in range(results + len(writes)):
        if k in written:
            positions.append(results + written[k])
        else:
            positions.append(taken)
            taken += 1
    if len(positions) == 1:
        (position,) = positions
        return lambda values: (values[position],)
    return operator.itemgetter(*positions)


def _shared(inputs: Sequence[torch.Tensor], results: Sequence[torch.Tensor]) -> tuple[bool, ...]:
    """Per result, whether it is copied (``Program``); ``()`` when none is."""
    owners = {t.untyped_storage().data_ptr() for t in inputs}
    shared = []
    for t in results:
        address = t.untyped_storage().data_ptr()
        shared.append(address in owners or not t.is_contiguous())
        owners.add(address)
    return tuple(shared) if any(shared) else ()


class InductorExecutable:
    """A kernel's cpu executable, and its TorchInductor programs once called: one per set of
    outputs written into inputs (``run_host_into``)."""

    def __init__(self, cpu: Any):
        self.cpu = cpu
        self.signature: Signature = cpu.signature
        #: why the kernel runs on the cpu runtime, or ``None``
        self.reason = rules.unsupported(cpu.kernel)
        self.programs: dict[tuple[tuple[int, int], ...], Program | None] = {}

    @property
    def kernel(self) -> Kernel:
        return self.cpu.kernel

    def artifacts(self) -> Mapping[str, bytes]:
        return self.cpu.artifacts()

    def program(self, writes: tuple[tuple[int, int], ...]) -> Program | None:
        """The TorchInductor program that writes ``writes``' outputs into their inputs, compiled
        at its first use; ``None`` once TorchInductor has refused the kernel (``reason``)."""
        if writes in self.programs:
            return self.programs[writes]
        try:
            with _torch.disable_current_modes():  # a graph's first call may run under one
                program: Program | None = Program(_compiled(self.kernel, writes), writes)
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
    whole_graphs = True  # it compiles in seconds and fuses across a model's layers
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

    def run_torch(
        self,
        executable: InductorExecutable,
        tensors: Sequence[torch.Tensor],
        writes: Sequence[tuple[int, int]] = (),
    ) -> list[torch.Tensor]:
        """The kernel on CPU tensors, its results as tensors of their own; each result ``k`` of
        ``writes`` is left in ``tensors[j]``, written there by the compiled loop that computes
        it. The compiled program takes and returns torch tensors, so a graph's kernel call
        passes them through without NumPy views either way."""
        writes = tuple(writes)
        program = None if executable.reason else executable.program(writes)
        if program is None:
            return self._on_cpu(executable, tensors, writes)
        if all(map(torch.Tensor.is_contiguous, tensors)):
            return program(tensors)
        # the programs are specialised on row-major inputs: a strided one is copied (rare: a
        # kernel call passes its inputs in their memory order), and one to be written is then
        # written back from its new value
        inputs = [t.contiguous() for t in tensors]
        if not writes:
            return program(inputs)
        results = self.run_torch(executable, inputs, ())
        for k, j in writes:
            tensors[j].copy_(results[k])
            results[k] = tensors[j]
        return results

    def run_host(
        self, executable: InductorExecutable, arrays: Sequence[np.ndarray]
    ) -> list[np.ndarray]:
        return self.run_host_into(executable, arrays, ())

    def run_host_into(
        self,
        executable: InductorExecutable,
        arrays: Sequence[np.ndarray],
        writes: Sequence[tuple[int, int]],
    ) -> list[np.ndarray]:
        """``run_torch`` on NumPy arrays (the device's eager ops, a caller without tensors)."""
        if executable.reason:
            return self.cpu.run_host_into(executable.cpu, arrays, writes)
        results = [
            torch_to_numpy(t)
            for t in self.run_torch(executable, [numpy_to_torch(a) for a in arrays], writes)
        ]
        for k, j in writes:  # a read-only array went to torch as a copy: written back
            if _address(results[k]) != _address(arrays[j]):
                np.copyto(arrays[j], results[k])
            results[k] = arrays[j]
        return results

    def _on_cpu(
        self,
        executable: InductorExecutable,
        tensors: Sequence[torch.Tensor],
        writes: tuple[tuple[int, int], ...],
    ) -> list[torch.Tensor]:
        """``run_torch`` on the cpu runtime, for a kernel TorchInductor does not run."""
        arrays = [torch_to_numpy(t) for t in tensors]
        results = self.cpu.run_host_into(executable.cpu, arrays, writes)
        into = dict(writes)
        return [tensors[into[k]] if k in into else numpy_to_torch(r) for k, r in enumerate(results)]


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]
