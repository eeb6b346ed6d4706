"""What a device runtime is: the interface the core compiles and runs kernels through.

Runtimes are registered by plugins (``nkipy_register_runtimes``). The core's ``cpu`` runtime is
one of them; ``nrt`` (Trainium) and ``xla`` come from ``nkipy-runtime``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np

from nkipy_core.errors import DeviceOutOfMemoryError
from nkipy_core.ir.graph import Kernel
from nkipy_core.ir.types import DType, TensorType, as_dims


@attrs.frozen
class CompileOptions:
    """What a runtime may use to compile a kernel; part of the cache key."""

    compiler_args: str = ""
    rank: int = 0
    world_size: int = 1
    #: the hardware generation to compile for, as configured (``None``: the runtime decides,
    #: e.g. from the machine it runs on); a runtime with targets says so through ``cache_tag``
    target: str | None = None


def _types(types: Iterable[TensorType]) -> tuple[TensorType, ...]:
    return tuple(types)


@attrs.frozen
class Signature:
    """The input and output types of an executable, stored beside its artifacts in the cache."""

    inputs: tuple[TensorType, ...] = attrs.field(converter=_types)
    outputs: tuple[TensorType, ...] = attrs.field(converter=_types)

    @classmethod
    def of(cls, kernel: Kernel) -> Signature:
        return cls(kernel.input_types, kernel.output_types)


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    """Row-major strides in elements, as torch gives a contiguous tensor."""
    strides: list[int] = []
    step = 1
    for size in reversed(shape):
        strides.insert(0, step)
        step *= max(size, 1)
    return strides


@attrs.frozen
class DeviceArray:
    """A tensor's place in device memory: a runtime buffer and a strided layout into it.

    This is what a device tensor means to a runtime: ``buffer`` is whatever the runtime's
    ``allocate`` returned (opaque to everyone else); ``shape``, ``strides`` and ``offset`` are in
    elements, as in torch, so views of one buffer are distinct arrays without any copy.
    """

    buffer: Any
    dtype: DType
    shape: tuple[int, ...] = attrs.field(converter=as_dims)
    strides: tuple[int, ...] = attrs.field(converter=as_dims)
    offset: int = 0

    @classmethod
    def contiguous(cls, buffer: Any, type_: TensorType) -> DeviceArray:
        return cls(buffer, type_.dtype, type_.shape, contiguous_strides(type_.shape))

    @property
    def type(self) -> TensorType:
        return TensorType(self.shape, self.dtype)

    @property
    def nbytes(self) -> int:
        return self.type.size * self.dtype.numpy.itemsize


@attrs.define
class DeviceStats:
    """What a runtime counts about its memory and its host<->device traffic, and the limit it
    holds its memory to.

    Every buffer a runtime makes or frees passes through ``allocate`` and ``free`` (kernel
    results and staged inputs too), so these are the device's own numbers: what
    ``torch.nkipy.memory_allocated()`` and ``memory_stats()`` report. ``allocate`` refuses, with a
    ``DeviceOutOfMemoryError``, a buffer that would take the device past ``limit``; a runtime
    therefore calls it before it allocates. Transfers are counted per call of
    ``to_device``/``to_host``; tests use the counters to prove that data stays on the device
    between kernels.
    """

    allocated: int = 0
    #: the most bytes held at once since the peaks were last reset
    max_allocated: int = 0
    #: buffers held now, and the most held at once since the peaks were last reset
    buffers: int = 0
    max_buffers: int = 0
    #: buffers and bytes allocated and freed since the totals were last reset
    allocations: int = 0
    frees: int = 0
    allocated_total: int = 0
    freed_total: int = 0
    #: allocations refused for passing ``limit``
    ooms: int = 0
    #: the most bytes the device may hold at once; ``None``: as much as the runtime can get
    limit: int | None = None
    host_to_device: int = 0
    host_to_device_bytes: int = 0
    device_to_host: int = 0
    device_to_host_bytes: int = 0

    def allocate(self, nbytes: int) -> None:
        if self.limit is not None and self.allocated + nbytes > self.limit:
            self.ooms += 1
            raise DeviceOutOfMemoryError(self._out_of_memory(nbytes))
        self.allocated += nbytes
        self.max_allocated = max(self.max_allocated, self.allocated)
        self.buffers += 1
        self.max_buffers = max(self.max_buffers, self.buffers)
        self.allocations += 1
        self.allocated_total += nbytes

    def free(self, nbytes: int) -> None:
        self.allocated -= nbytes
        self.buffers -= 1
        self.frees += 1
        self.freed_total += nbytes

    def reset_peaks(self) -> None:
        """Start the peaks (``max_allocated``, ``max_buffers``) again from what is held now."""
        self.max_allocated, self.max_buffers = self.allocated, self.buffers

    def reset_accumulated(self) -> None:
        """Start the totals (allocations, frees, their bytes, refusals) again from zero."""
        self.allocations = self.frees = self.allocated_total = self.freed_total = self.ooms = 0

    def _out_of_memory(self, nbytes: int) -> str:
        assert self.limit is not None  # only asked when the limit refused an allocation
        free = max(self.limit - self.allocated, 0)
        return (
            f"nkipy device out of memory: tried to allocate {_size(nbytes)}, but only {_size(free)} "
            f"of its {_size(self.limit)} memory limit are free; {_size(self.allocated)} are held by "
            f"{self.buffers} live tensors and kernel results. Free tensors you no longer need "
            "(del them, or empty a storage with storage.resize_(0)), use smaller batches, or raise "
            "the limit: init_nkipy_backend(memory_limit=...), NKIPY_MEMORY_LIMIT, or "
            "torch.nkipy.set_per_process_memory_fraction(...)."
        )

    def transfers(self) -> dict[str, int]:
        return {
            "host_to_device": self.host_to_device,
            "host_to_device_bytes": self.host_to_device_bytes,
            "device_to_host": self.device_to_host,
            "device_to_host_bytes": self.device_to_host_bytes,
        }


def _size(nbytes: int) -> str:
    """``1.50 GiB (1610612736 bytes)``: readable, and exact."""
    value, unit = float(nbytes), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{nbytes} bytes" if unit == "bytes" else f"{value:.2f} {unit} ({nbytes} bytes)"


@runtime_checkable
class Executable(Protocol):
    """A compiled kernel, run by its runtime's ``run`` on device arrays."""

    signature: Signature

    def artifacts(self) -> Mapping[str, bytes]:
        """Files that ``Runtime.load`` needs to rebuild this executable in a new process."""
        ...


@runtime_checkable
class Runtime(Protocol):
    """A device runtime. ``priority`` orders the default choice among available runtimes.

    ``hardware`` says whether the runtime drives a real accelerator (``nrt``) or simulates one
    (``cpu``). Only a hardware runtime makes ``torch.nkipy.is_available()`` (and with it
    ``torch.accelerator``) say yes on its own; a simulator does when the user names it. A runtime
    that does not say is taken for a simulator.
    """

    name: str
    priority: int
    hardware: bool

    def available(self) -> tuple[bool, str]:
        """(True, "") or (False, what is missing and how to get it)."""
        ...

    def compile(self, kernel: Kernel, options: CompileOptions) -> Executable: ...

    def load(
        self, artifacts: Mapping[str, bytes], signature: Signature, options: CompileOptions
    ) -> Executable: ...

    # -- device memory: the only code that knows what a buffer is ------------------------

    stats: DeviceStats

    def allocate(self, nbytes: int) -> Any:
        """A new device buffer of ``nbytes`` bytes (contents undefined)."""
        ...

    def free(self, buffer: Any) -> None: ...

    def to_device(self, host: np.ndarray, dst: DeviceArray) -> None:
        """Copy a host array of ``dst``'s shape and dtype into ``dst`` (one counted transfer)."""
        ...

    def to_host(self, src: DeviceArray) -> np.ndarray:
        """A new host array holding ``src`` (one counted transfer)."""
        ...

    def copy(self, src: DeviceArray, dst: DeviceArray) -> None:
        """Device-to-device copy between arrays of one shape and dtype; no host transfer."""
        ...

    def run(self, executable: Executable, inputs: Sequence[DeviceArray]) -> list[DeviceArray]:
        """Run a kernel on device arrays; its outputs are new contiguous device arrays."""
        ...

    # Optional: ``describe() -> str`` says what an available runtime runs on (versions, devices),
    # and what a hardware runtime compiles for even where it is unavailable; ``nkipy-ops doctor``
    # prints it.
    #
    # Optional: ``declines(kernel, options) -> str`` says why the runtime's compiler cannot take
    # ``kernel`` ("" if it can). The planner asks it of each op's trial kernel, so an op the
    # target cannot take runs as torch on CPU, with a fallback warning that gives the reason,
    # instead of failing in the compiler (``nrt``: its Neuron target profile). Its answer must
    # depend only on the kernel and on what ``cache_tag`` names (plans are cached under both).
    #
    # Optional, for runtimes whose compiler is a separate, slow tool (``nrt``):
    # - ``parallel_compile = True``: independent kernels of one graph compile concurrently (threads
    #   bounded by the cores), because ``compile`` waits on a subprocess rather than holding the GIL.
    # - ``cache_tag(options) -> str``: what else the artifacts depend on (the resolved hardware
    #   target), folded into the cache keys so that kernels for two targets never share an entry.
    # - ``can_compile() -> (bool, reason)``: compiling works here even if ``available()`` says no
    #   (no device); ahead-of-time compiles (``nkipy-ops precompile``) need only this.
    #
    # Optional: ``whole_graphs = True``: a graph's repeated layers are fused with the rest
    # (``Config.dedup_layers`` does not apply), for a runtime whose compile is fast and grows with
    # the graph rather than per kernel, and which fuses across the layers' edges (``inductor``):
    # one kernel per supported region saves a call per layer and the values between layers.
    #
    # Optional, for multi-process runs (torch.distributed):
    # - ``kernel_collectives = True``: kernels may hold collective primitives, because the
    #   runtime runs them between the processes of the group (the ``cpu`` runtime through
    #   torch.distributed, ``nrt`` on the devices). Without it, collectives stay outside kernels
    #   and run through torch.distributed, with a fallback warning that says so.
    # - ``open_device() -> None``: bind this process to its device now; ``torch.nkipy.init()``
    #   and the ``nkipy`` process group call it, so that more ranks on a host than it has devices
    #   fail in ``init_process_group`` with the runtime's typed error, not at the first tensor.
    #
    # Optional, for kernels from elsewhere (``custom_call``, e.g. NKI kernels):
    # - ``host_custom_calls = True``: kernels may hold any custom call; the runtime runs each
    #   through its ``host`` function (the ``cpu`` runtime).
    # - ``custom_call_targets = frozenset({...})``: kernels may hold custom calls of these HLO
    #   targets, which the runtime's compiler replaces with their kernels (``nrt``:
    #   ``AwsNeuronCustomNativeKernel``). A custom call the runtime can run neither way keeps
    #   its node outside kernels (as torch, on CPU), with a fallback warning that says so.
    #
    # Optional, what the device reports of itself (``torch.nkipy.mem_get_info``,
    # ``get_device_properties``, ``get_device_name``):
    # - ``memory_info() -> (free, total)``: the bytes of device memory free and in all, as the
    #   hardware (or, for a simulator, the host) has them, whatever nkipy's own limit.
    # - ``device_name``: what the device is (``"AWS Trainium2 NeuronCore"``).
    # - ``synchronize() -> None``: wait for the work the runtime queued (runtimes that run
    #   kernels synchronously, as all here do, need none).
    #
    # Optional: ``run_host(executable, arrays) -> arrays`` runs a kernel on host NumPy arrays
    # directly; a runtime whose device memory is host memory offers it so that graphs of CPU
    # tensors skip staging. Without it, CPU tensors go through to_device/run/to_host.
    #
    # Optional: ``run_host_into(executable, arrays, writes) -> arrays`` is ``run_host`` for a
    # kernel that updates some of its inputs: for each pair ``(k, j)`` of ``writes``, result
    # ``k`` is left in ``arrays[j]`` (the memory of the tensor the graph writes back into), which
    # is returned for it. A runtime that can have the kernel write there itself saves a new
    # array and a copy per updated tensor (an optimizer step's parameters and states). Without
    # it, the results are copied into those tensors after the call.
    #
    # Optional: ``run_torch(executable, tensors, writes=()) -> tensors`` is ``run_host_into`` on
    # CPU torch tensors, for a runtime that computes with torch (``inductor``): a graph's kernel
    # call passes its tensors as they are and takes the results as tensors, with no NumPy view
    # made either way (tens of microseconds per call of a kernel with many inputs). Results
    # are memory of their own, except those ``writes`` leaves in their input's tensor.
    #
    # Optional: ``to_host_into(src, dst) -> None`` copies ``src`` into an existing host array of
    # its shape and dtype (one counted transfer), so that ``host.copy_(device_tensor)`` and
    # ``.cpu()`` copy once instead of through a new host array (``to_host``) and again into
    # place; the ``nkipy`` process group stages every collective's inputs this way.
    #
    # Optional: ``run_into(executable, inputs, outputs) -> None`` runs a kernel and writes its
    # results into existing device arrays of the results' types (they may be inputs too), for
    # eager in-place ops. Without it, the results are new arrays, copied into place and freed.


def runs_custom_call(runtime: Any, target: str) -> bool:
    """Whether kernels on ``runtime`` may hold a custom call to ``target`` (see ``Runtime``)."""
    return bool(getattr(runtime, "host_custom_calls", False)) or target in getattr(
        runtime, "custom_call_targets", ()
    )
