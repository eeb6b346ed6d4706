"""The embedded ``cpu`` runtime: executes kernels as generated NumPy code.

Every stage before the hardware runs here, so the whole pipeline is testable on any machine.
It is registered through the same ``nkipy_register_runtimes`` hook as any plugin's runtime
(entry point ``cpu`` of nkipy-core), with the lowest priority: any available device wins.

Its artifacts are data, not code: the kernel's IR text (``kernel.ir``) and what that text shows
only by digest (``kernel.data.json``, see ``printer.kernel_data``). Loading one parses the text
strictly (``ir.parser``) and generates the NumPy code anew, so the code that runs is always
nkipy's own, made from a verified kernel: whoever can write into a kernel cache cannot make a
process that uses it run their code. The ``kernel.py`` of a cache entry is for people to read.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

from nkipy_core.errors import VerificationError
from nkipy_core.ir import codegen
from nkipy_core.ir.graph import Kernel
from nkipy_core.ir.parser import parse_kernel
from nkipy_core.ir.printer import format_kernel, kernel_data
from nkipy_core.ir.types import TensorType
from nkipy_core.plugin.hookspecs import hookimpl
from nkipy_core.runtime.base import (
    CompileOptions,
    DeviceArray,
    DeviceStats,
    Signature,
    contiguous_strides,
)
from nkipy_core.runtime.communicator import TorchDistributedCommunicator

#: the artifacts: the kernel's IR text, and its constants and opaque strings (JSON)
IR = "kernel.ir"
DATA = "kernel.data.json"

#: bytes from which a contiguous copy goes through torch's copy kernel. glibc's memmove, which
#: NumPy copies with, is about ten times slower when source and destination lie 16 bytes apart
#: modulo a 4 KiB page (a 256 KiB copy: 159 µs instead of 14 µs on the benchmark machine), and
#: device buffers and host tensors lie at any such distance; torch's kernel is not affected. Below
#: this size NumPy's lower call overhead wins.
TORCH_COPY_BYTES = 16 << 10
#: an integer dtype of each itemsize: torch copies any dtype's bits through one of these (it
#: cannot wrap NumPy's bfloat16)
_BITS = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for arrays of one dtype and shape (see ``TORCH_COPY_BYTES``)."""
    if (
        dst.nbytes >= TORCH_COPY_BYTES
        and dst.dtype == src.dtype
        and dst.flags.c_contiguous
        and src.flags.c_contiguous
        and src.flags.writeable  # torch wraps writable arrays only
        and not np.may_share_memory(dst, src)  # torch refuses overlapping copies; NumPy does them
    ):
        import torch  # loaded: the device is torch's

        bits = _BITS[dst.dtype.itemsize]
        torch.from_numpy(dst.view(bits)).copy_(torch.from_numpy(src.view(bits)))
        return
    np.copyto(dst, src, casting="no")


def _errstate_ignore():
    """NumPy 2's error-state context variable and the error object that ignores everything, or
    ``None`` (NumPy 1.x: no context variable; ``np.errstate`` then)."""
    try:
        from numpy._core._ufunc_config import (  # type: ignore[attr-defined]  # not in NumPy's stubs
            _extobj_contextvar,
            _make_extobj,
        )

        return _extobj_contextvar, _make_extobj(all="ignore")
    except (ImportError, TypeError):
        return None


_ERRSTATE = _errstate_ignore()


class CpuExecutable:
    """A kernel as NumPy code that nkipy generated from it; ``source`` is that code.

    Its large outputs (``codegen.recycled_outputs``) are written into the arrays the same
    outputs were on the previous call when nothing holds those any more: a NumPy array that
    owns its memory is only reachable through references to it (every view, torch tensor made by
    ``torch.from_numpy`` and buffer export holds one), so an array this object alone refers to is
    free. An optimizer step's new parameters, or a training step's activations and gradients,
    are dropped before the next call and their memory is written again instead of allocated
    anew. From its second call on, an executable holds the arrays of its last call until the
    next, which is the memory this costs; a kernel called once (a prefill, a shape seen once)
    holds nothing."""

    def __init__(self, kernel: Kernel, communicator: TorchDistributedCommunicator):
        self.kernel = kernel
        self.signature = Signature.of(kernel)
        self.source = codegen.generate(kernel)
        self._fn = codegen.load(
            self.source,
            filename=f"<nkipy cpu kernel {hash(self.source) & 0xFFFF:04x}>",
            communicator=communicator,
        )
        self.recycled = codegen.recycled_outputs(kernel)
        self._run = self._recycling if self.recycled else self._fn
        #: the recycled outputs of the last call, in a list that ``_recycling`` pops: a pop is
        #: atomic, so two threads never get the same arrays
        self._spare: list[list[np.ndarray | None]] = []
        #: how many outputs were written into a spare array, how many were new, and how many
        #: into an input's array (tests)
        self.reused = self.allocated = self.written_in_place = 0
        #: per (output, input): whether the output may be written into the input's array
        self._in_place: dict[tuple[int, int], bool] = {}

    def _recycling(
        self, *arrays: np.ndarray, into: Mapping[int, np.ndarray] | None = None
    ) -> Sequence[np.ndarray]:
        try:
            spare = self._spare.pop()
        except IndexError:
            spare = []
        into = into or {}
        out: list[np.ndarray | None] = [None] * len(self.signature.outputs)
        for k, index in enumerate(self.recycled[: len(spare)]):
            # referred to by ``spare`` and getrefcount's argument: by nothing else
            if spare[k] is not None and index not in into and sys.getrefcount(spare[k]) == 2:
                out[index] = spare[k]
        reused = sum(o is not None for o in out)
        self.reused += reused
        self.allocated += len(self.recycled) - reused - len(into)
        for index, array in into.items():
            out[index] = array
        self.written_in_place += len(into)
        results = self._fn(*arrays, out=tuple(out))
        if self.reused + self.allocated > len(self.recycled):  # not the first call
            # never an input's array: it is the caller's memory, not this executable's spare
            self._spare = [[None if i in into else results[i] for i in self.recycled]]
        return results

    def writes_into_input(self, output: int, input: int) -> bool:
        """Whether a call may write ``output`` into the array of ``input`` itself
        (``codegen.writes_into_param``, decided once per pair)."""
        key = (output, input)
        known = self._in_place.get(key)
        if known is None:
            known = self._in_place[key] = codegen.writes_into_param(self.kernel, output, input)
        return known

    if _ERRSTATE is not None:

        def __call__(
            self, *arrays: np.ndarray, into: Mapping[int, np.ndarray] | None = None
        ) -> Sequence[np.ndarray]:
            """The kernel under ``np.errstate(all="ignore")`` (kernels compute inf and NaN
            silently, as torch does); with ``into``, each output ``k`` of it written into
            ``into[k]``, an input's array that ``writes_into_input`` allows. Entering
            ``np.errstate`` builds its error object anew each time (about 1.5 µs, a tenth of a
            small kernel call); NumPy 2's object is built once and only the context variable
            ``np.errstate`` sets is set and reset here."""
            variable, ignore = _ERRSTATE
            token = variable.set(ignore)
            try:
                return self._recycling(*arrays, into=into) if into else self._run(*arrays)
            finally:
                variable.reset(token)
    else:

        def __call__(
            self, *arrays: np.ndarray, into: Mapping[int, np.ndarray] | None = None
        ) -> Sequence[np.ndarray]:
            with np.errstate(all="ignore"):
                return self._recycling(*arrays, into=into) if into else self._run(*arrays)

    def artifacts(self) -> Mapping[str, bytes]:
        data = json.dumps(kernel_data(self.kernel), indent=1, sort_keys=True)
        return {IR: format_kernel(self.kernel, with_origin=False).encode(), DATA: data.encode()}


class CpuRuntime:
    """Device memory is host memory here, but only this class knows it: a buffer is a
    C-contiguous NumPy array (flat ``uint8`` when allocated, a kernel's result array when
    adopted) and a ``DeviceArray`` is a strided NumPy view of its bytes."""

    name = "cpu"
    priority = 0
    hardware = False  # a simulator: torch sees the device as an accelerator only on request
    kernel_collectives = True  # through torch.distributed (runtime/communicator.py)
    host_custom_calls = True  # each through its host function (ir/numpy_support._custom_call)
    device_name = "nkipy cpu runtime (NumPy on the host)"

    def __init__(self) -> None:
        self.stats = DeviceStats()
        #: runs kernels' collectives through torch.distributed; one per runtime, since it keeps
        #: the subgroups it made
        self.communicator = TorchDistributedCommunicator()

    def available(self) -> tuple[bool, str]:
        return True, ""

    def compile(self, kernel: Kernel, options: CompileOptions) -> CpuExecutable:
        return CpuExecutable(kernel, self.communicator)

    def load(
        self, artifacts: Mapping[str, bytes], signature: Signature, options: CompileOptions
    ) -> CpuExecutable:
        """The executable of stored ``artifacts``: their kernel parsed (``IRParseError`` if it is
        not one nkipy printed, or names a host function no imported module declares) and its
        code generated anew."""
        kernel = parse_kernel(artifacts[IR].decode(), _data(artifacts[DATA]))
        if Signature.of(kernel) != signature:
            raise VerificationError(
                f"the stored kernel {kernel.name} has the signature {Signature.of(kernel)}, "
                f"its entry says {signature}: clear the kernel cache"
            )
        return CpuExecutable(kernel, self.communicator)

    # -- device memory ---------------------------------------------------------------------

    def allocate(self, nbytes: int) -> np.ndarray:
        self.stats.allocate(nbytes)  # first: it refuses what would pass the device's limit
        return np.empty(nbytes, dtype=np.uint8)

    def free(self, buffer: np.ndarray) -> None:
        self.stats.free(buffer.nbytes)

    def memory_info(self) -> tuple[int, int]:
        """The host's free and total physical memory: this device's memory is the host's."""
        page = os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * page
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * page
        except (ValueError, OSError):  # not every system reports it (macOS)
            free = max(total - self.stats.allocated, 0)
        return free, total

    def to_device(self, host: np.ndarray, dst: DeviceArray) -> None:
        self.stats.host_to_device += 1
        self.stats.host_to_device_bytes += dst.nbytes
        _copy(_view(dst), host)

    def to_host(self, src: DeviceArray) -> np.ndarray:
        self.stats.device_to_host += 1
        self.stats.device_to_host_bytes += src.nbytes
        view = _view(src)
        host = np.empty(view.shape, view.dtype)
        _copy(host, view)
        return host

    def to_host_into(self, src: DeviceArray, dst: np.ndarray) -> None:
        self.stats.device_to_host += 1
        self.stats.device_to_host_bytes += src.nbytes
        _copy(dst, _view(src))

    def copy(self, src: DeviceArray, dst: DeviceArray) -> None:
        _copy(_view(dst), _view(src))

    def run(self, executable: CpuExecutable, inputs: Sequence[DeviceArray]) -> list[DeviceArray]:
        outputs = self.run_host(executable, [_view(a) for a in inputs])
        return [self._adopt(o, t) for o, t in zip(outputs, executable.signature.outputs)]

    def run_into(
        self,
        executable: CpuExecutable,
        inputs: Sequence[DeviceArray],
        outputs: Sequence[DeviceArray],
    ) -> None:
        """``run``, writing the results into ``outputs`` (arrays of the results' types, which
        may be inputs too): an in-place op stores its result where it belongs, without a new
        buffer in between (see ``Runtime``)."""
        for result, out in zip(self.run_host(executable, [_view(a) for a in inputs]), outputs):
            view = _view(out)
            if result.shape != view.shape:
                result = result.reshape(view.shape)
            np.copyto(view, result, casting="unsafe")  # as ``_adopt``'s astype

    def run_host(self, executable: CpuExecutable, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Host arrays in, host arrays out: for the cpu runtime host memory *is* device memory,
        so a graph of CPU tensors needs no staging (the optional fast path of ``Runtime``).

        Every result is memory of its own, writable: a kernel may return an input, a read-only
        broadcast, or one value twice (after CSE), and those are copied. A result that owns its
        memory and is none of the inputs and earlier results is new (what a NumPy operation
        returns), so the slower overlap test is only made for views."""
        return _owned(executable(*arrays), arrays)

    def run_host_into(
        self,
        executable: CpuExecutable,
        arrays: Sequence[np.ndarray],
        writes: Sequence[tuple[int, int]],
    ) -> list[np.ndarray]:
        """``run_host`` that leaves each result ``k`` of ``writes``' pairs ``(k, j)`` in input
        ``arrays[j]`` and returns that array for it (see ``Runtime``). The kernel writes it there
        itself where its code allows (``CpuExecutable.writes_into_input``: an optimizer step's
        parameters and states are updated where they lie); any other is copied in after the
        call, once every result is memory of its own."""
        into = {k: arrays[j] for k, j in writes if executable.writes_into_input(k, j)}
        results = executable(*arrays, into=into)
        owned = _owned(results, arrays, into)
        for k, j in writes:
            if k not in into:
                _copy(arrays[j], owned[k])
                owned[k] = arrays[j]
        return owned

    def _adopt(self, result: np.ndarray, type_: TensorType) -> DeviceArray:
        """Make a kernel result (owned, see ``run_host``) a device buffer without copying it.
        The array itself is the buffer: whatever reads a buffer makes a NumPy view of it
        through the buffer protocol (``_view``), which a contiguous array of any dtype offers
        as its bytes."""
        dtype = type_.dtype.numpy
        if result.dtype != dtype or result.shape != type_.shape or not result.flags.c_contiguous:
            result = np.ascontiguousarray(result.astype(dtype, copy=False).reshape(type_.shape))
        self.stats.allocate(result.nbytes)
        return DeviceArray(result, type_.dtype, type_.shape, _strides(type_.shape))


def _owned(
    results: Sequence[np.ndarray],
    arrays: Sequence[np.ndarray],
    written: Mapping[int, np.ndarray] | None = None,
) -> list[np.ndarray]:
    """A kernel's results as writable row-major memory of their own (``run_host``), except
    those it wrote into an input's array as ``written`` told it to, which stay that array.
    Row-major because that is how torch lays out a graph's new tensors: a call returns what
    the kernel gives (the dims of an output laid out otherwise are put first by the kernel,
    ``lower.output_orders``), and code that views it as eager's result must not fail."""
    owned: list[np.ndarray] = []
    for i, out in enumerate(results):
        if written and i in written:
            owned.append(out)
            continue
        if type(out) is not np.ndarray:
            out = np.asarray(out)
        if not _new_memory(out, arrays, owned):
            out = np.array(out, order="C", copy=True)
        elif not out.flags.c_contiguous:  # NumPy kept a transposed operand's layout
            out = np.ascontiguousarray(out)
        owned.append(out)
    return owned


def _new_memory(out: np.ndarray, arrays: Sequence[np.ndarray], owned: list[np.ndarray]) -> bool:
    """Whether a kernel result is writable memory that no input and no earlier result shares.

    A result that owns its memory was allocated by the kernel, unless it is an input itself:
    no input can be a view of it, so the identity test suffices (``np.may_share_memory``
    costs ten times as much)."""
    if not out.flags.writeable:
        return False
    for other in owned:
        if np.may_share_memory(out, other):
            return False
    if out.flags.owndata:
        for other in arrays:
            if other is out:
                return False
        return True
    for other in arrays:
        if np.may_share_memory(out, other):
            return False
    return True


def _data(raw: bytes) -> dict[str, str]:
    """The ``kernel.data.json`` artifact: a JSON object of strings, else a ``VerificationError``."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise VerificationError(f"{DATA} is not a JSON object of strings: clear the kernel cache")
    return data


@lru_cache(maxsize=1024)
def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of a kernel result's shape (a kernel has few shapes; cached)."""
    return tuple(contiguous_strides(shape))


def _view(array: DeviceArray) -> np.ndarray:
    """The NumPy array a device array is (made for every kernel input: positional arguments
    and a list are what ``np.ndarray`` parses fastest)."""
    dtype = array.dtype.numpy
    size = dtype.itemsize
    try:
        return np.ndarray(
            array.shape, dtype, array.buffer, array.offset * size, [s * size for s in array.strides]
        )
    except ValueError:
        if 0 not in array.shape:
            raise
        # an empty view may sit past its storage's end (an offset or a permuted size-0 tensor),
        # which NumPy refuses; it has no elements to read or write
        return np.empty(array.shape, dtype)


@hookimpl
def nkipy_register_runtimes(registry) -> None:
    registry.register(CpuRuntime())
