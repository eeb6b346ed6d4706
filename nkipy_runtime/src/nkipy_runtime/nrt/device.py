"""NRT device tensors behind the runtime buffer hooks, and running a NEFF on them.

A buffer is one NRT device tensor on this device's NeuronCore; a ``DeviceArray`` is a strided
view into it, as for every runtime. libnrt moves only byte ranges (see ``layout.py``), so:

- ``to_device``/``to_host`` of a contiguous view is one nrt_tensor_write/read at its byte offset;
  a strided view reads the span that covers it, scatters on the host and writes the span back
  (read-modify-write: the span's bytes cross the bus twice, other bytes in it are rewritten
  unchanged).
- ``copy`` stays on the device: one nrt_tensor_copy per contiguous run shared by source and
  destination (one call for contiguous arrays, one per row for a row slice). A layout with more
  than ``MAX_COPY_RUNS`` runs (a transpose, say) would cost one libnrt call per element or row,
  so it is staged through the host instead, and counted as the two transfers it is.
- ``run`` binds inputs by the NEFF's tensor info in order: a whole-buffer input as it is, a
  contiguous view as an nrt_tensor_allocate_slice (no copy), a strided view staged into a new
  contiguous tensor first.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence

import attrs
import numpy as np

from nkipy_core.errors import DeviceError, NkipyError
from nkipy_core.ir import TensorType
from nkipy_core.runtime import DeviceArray, DeviceStats

from . import layout
from .library import USAGE_INPUT, USAGE_OUTPUT, NrtLibrary, TensorInfo

#: beyond this many nrt_tensor_copy calls, a device copy goes through the host
MAX_COPY_RUNS = 256


class NeffBindingError(NkipyError):
    """A NEFF's inputs or outputs do not match the arrays or types it is run with."""


@attrs.frozen
class NrtBuffer:
    """An NRT device tensor (``nrt_tensor_t*``) of ``nbytes`` bytes."""

    tensor: int
    nbytes: int


@attrs.frozen
class LoadedModel:
    """A NEFF loaded on the device, with its inputs and outputs in libnrt's order."""

    handle: int
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]


class NrtDevice:
    """One NeuronCore (``core`` among the visible ones) driven through ``library``."""

    def __init__(self, library: NrtLibrary, core: int = 0):
        self.library = library
        self.core = core
        self.stats = DeviceStats()
        self._models: dict[str, LoadedModel] = {}
        self._names = itertools.count()

    # -- buffer hooks ----------------------------------------------------------------------

    def allocate(self, nbytes: int) -> NrtBuffer:
        self.stats.allocate(nbytes)  # first: it refuses what would pass the device's limit
        try:
            # an empty tensor is still allocated (1 byte) so that every buffer is a real NRT tensor
            tensor = self.library.allocate(max(nbytes, 1), self.core, f"nkipy{next(self._names)}")
        except BaseException:
            self.stats.free(nbytes)
            raise
        return NrtBuffer(tensor, nbytes)

    def free(self, buffer: NrtBuffer) -> None:
        self.library.free(buffer.tensor)
        self.stats.free(buffer.nbytes)

    def to_device(self, host: np.ndarray, dst: DeviceArray) -> None:
        if host.shape != dst.shape or host.dtype != dst.dtype.numpy:
            raise DeviceError(
                f"to_device: host array {host.dtype}{list(host.shape)} does not match the device array "
                f"{dst.dtype.numpy}{list(dst.shape)}; convert it first"
            )
        self.stats.host_to_device += 1
        self.stats.host_to_device_bytes += dst.nbytes
        self._write(host, dst)

    def to_host(self, src: DeviceArray) -> np.ndarray:
        self.stats.device_to_host += 1
        self.stats.device_to_host_bytes += src.nbytes
        return self._read(src)

    def copy(self, src: DeviceArray, dst: DeviceArray) -> None:
        runs = layout.common_runs(src, dst)
        if runs.count <= MAX_COPY_RUNS:
            for src_offset, dst_offset in runs:
                self.library.copy(
                    src.buffer.tensor, src_offset, dst.buffer.tensor, dst_offset, runs.nbytes
                )
            return
        self.stats.device_to_host += 1
        self.stats.device_to_host_bytes += src.nbytes
        self.stats.host_to_device += 1
        self.stats.host_to_device_bytes += dst.nbytes
        self._write(self._read(src), dst)

    # -- running a NEFF --------------------------------------------------------------------

    def run(
        self, neff: bytes, inputs: Sequence[DeviceArray], output_types: Sequence[TensorType]
    ) -> list[DeviceArray]:
        """Execute ``neff`` on ``inputs``; new contiguous device arrays of ``output_types``."""
        model = self.model(neff)
        _check_binding("input", model.inputs, [a.nbytes for a in inputs])
        _check_binding("output", model.outputs, [_nbytes(t) for t in output_types])
        temporaries: list[NrtBuffer] = []
        outputs: list[DeviceArray] = []
        try:
            bound_inputs = {
                info.name: self._bind(a, temporaries) for info, a in zip(model.inputs, inputs)
            }
            for (
                type_
            ) in output_types:  # appended one by one: a failed allocation frees the earlier ones
                outputs.append(DeviceArray.contiguous(self.allocate(_nbytes(type_)), type_))
            bound_outputs = {info.name: o.buffer.tensor for info, o in zip(model.outputs, outputs)}
            self.library.execute(model.handle, bound_inputs, bound_outputs)
        except BaseException:
            for output in outputs:
                self.free(output.buffer)
            raise
        finally:
            for temporary in temporaries:
                self.free(temporary)
        return outputs

    def model(self, neff: bytes) -> LoadedModel:
        """The loaded model for ``neff``: loaded once per NEFF content, then cached."""
        digest = hashlib.sha256(neff).hexdigest()
        if digest not in self._models:
            handle = self.library.load(neff, self.core)
            infos = self.library.tensor_info(handle)
            self._models[digest] = LoadedModel(
                handle,
                tuple(i for i in infos if i.usage == USAGE_INPUT),
                tuple(i for i in infos if i.usage == USAGE_OUTPUT),
            )
        return self._models[digest]

    def unload_all(self) -> None:
        """Unload every cached model (before freeing the device's cores to another process)."""
        while self._models:
            self.library.unload(self._models.popitem()[1].handle)

    # -- internals -------------------------------------------------------------------------

    def _bind(self, array: DeviceArray, temporaries: list[NrtBuffer]) -> int:
        """An NRT tensor holding exactly ``array``'s bytes, for a tensor set."""
        step = layout.itemsize(array)
        if layout.is_contiguous(array):
            if array.offset == 0 and array.nbytes == array.buffer.nbytes:
                return array.buffer.tensor
            tensor = self.library.allocate_slice(
                array.buffer.tensor, array.offset * step, array.nbytes, f"nkipy{next(self._names)}"
            )
            temporaries.append(NrtBuffer(tensor, 0))
            return tensor
        staged = self.allocate(array.nbytes)
        temporaries.append(staged)
        self.copy(array, DeviceArray.contiguous(staged, array.type))
        return staged.tensor

    def _write(self, host: np.ndarray, dst: DeviceArray) -> None:
        if dst.nbytes == 0:
            return
        step = layout.itemsize(dst)
        if layout.is_contiguous(dst):
            self.library.write(dst.buffer.tensor, np.ascontiguousarray(host), dst.offset * step)
            return
        first, count = layout.span(dst)
        staging = np.empty(count, dst.dtype.numpy)
        self.library.read(dst.buffer.tensor, staging, first * step)
        layout.view_in_span(staging, dst)[...] = host
        self.library.write(dst.buffer.tensor, staging, first * step)

    def _read(self, src: DeviceArray) -> np.ndarray:
        step = layout.itemsize(src)
        if layout.is_contiguous(src):
            out = np.empty(src.shape, src.dtype.numpy)
            if src.nbytes:
                self.library.read(src.buffer.tensor, out, src.offset * step)
            return out
        first, count = layout.span(src)
        staging = np.empty(count, src.dtype.numpy)
        self.library.read(src.buffer.tensor, staging, first * step)
        return layout.view_in_span(staging, src).copy()


def _nbytes(type_: TensorType) -> int:
    return type_.size * type_.dtype.numpy.itemsize


def _check_binding(kind: str, infos: Sequence[TensorInfo], sizes: Sequence[int]) -> None:
    expected = [i.size for i in infos]
    if expected != list(sizes):
        names = ", ".join(f"{i.name} ({i.size} B)" for i in infos)
        raise NeffBindingError(
            f"the NEFF has {len(infos)} {kind}(s) [{names}] but was given {len(sizes)} of "
            f"{list(sizes)} bytes; the NEFF does not belong to this kernel: clear its cache entry and recompile"
        )
