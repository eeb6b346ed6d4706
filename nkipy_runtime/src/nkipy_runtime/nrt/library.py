"""ctypes binding of the public libnrt C API: the one module that calls into ``libnrt.so``.

The signatures, enum values and the ``nrt_tensor_info_t`` layout follow the headers published in
aws-neuron/aws-neuron-sdk (src/libnrt/include/nrt/nrt.h, nrt_experimental.h, nrt_status.h) and the
call sequence of Neuron's "Developer Guide - NeuronX Runtime" (nrt-api-guide): nrt_init, nrt_load,
nrt_get_model_tensor_info, nrt_tensor_allocate per tensor, nrt_add_tensor_to_tensor_set by the
NEFF's tensor names, nrt_execute, nrt_tensor_read, nrt_unload, nrt_close. Declaring ``argtypes``
and ``restype`` for every function matters: without them ctypes passes ``size_t`` and pointers as
C ``int`` and silently truncates them on 64-bit machines.

``nrt_init`` and ``nrt_close`` are process-wide in libnrt, so one ``NrtLibrary`` exists per
library path (``NrtLibrary.open``); it initialises on first use, after choosing this rank's cores
(``cores.py``), and closes at interpreter exit.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import functools
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata

import attrs
import numpy as np

from nkipy_core.errors import NkipyError

from . import cores
from .locate import LIBRARY_ENV, find_library
from .status import check

# nrt_tensor_placement_t (nrt.h)
PLACEMENT_DEVICE = 0
# nrt_framework_type_t (nrt.h): nkipy is its own framework layer, not torch-neuronx, so it
# announces framework-less execution rather than NRT_FRAMEWORK_TYPE_PYTORCH (3).
FRAMEWORK_TYPE_NO_FW = 1
# nrt_tensor_usage_t (nrt_experimental.h)
USAGE_INPUT, USAGE_OUTPUT = 0, 1
# nrt_load's vnc_count is deprecated; the header says to always pass -1
_VNC_COUNT_DEPRECATED = -1
NRT_TENSOR_NAME_MAX = 256


class LibnrtNotFoundError(NkipyError):
    """No libnrt.so could be found or loaded."""


@attrs.frozen
class TensorInfo:
    """One input or output of a loaded NEFF, as ``nrt_get_model_tensor_info`` reports it."""

    name: str
    usage: int  # USAGE_INPUT or USAGE_OUTPUT
    size: int  # bytes
    dtype: int  # nrt_dtype_t
    shape: tuple[int, ...] = attrs.field(converter=tuple)


class _CTensorInfo(ctypes.Structure):
    # nrt_tensor_info_t of nrt_experimental.h
    _fields_ = [
        ("name", ctypes.c_char * NRT_TENSOR_NAME_MAX),
        ("usage", ctypes.c_int),
        ("size", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_uint32)),
        ("ndim", ctypes.c_uint32),
    ]


class _CTensorInfoArray(ctypes.Structure):
    # nrt_tensor_info_array_t: a count followed by a flexible array of nrt_tensor_info_t
    _fields_ = [("tensor_count", ctypes.c_uint64), ("tensor_array", _CTensorInfo * 0)]


_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_STATUS = ctypes.c_int
_SIGNATURES: dict[str, tuple[type | None, list[type]]] = {
    "nrt_init": (_STATUS, [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p]),
    "nrt_close": (None, []),
    "nrt_get_total_nc_count": (_STATUS, [ctypes.POINTER(ctypes.c_uint32)]),
    "nrt_load": (_STATUS, [_P, ctypes.c_size_t, ctypes.c_int32, ctypes.c_int32, _PP]),
    "nrt_unload": (_STATUS, [_P]),
    "nrt_get_model_tensor_info": (_STATUS, [_P, ctypes.POINTER(ctypes.POINTER(_CTensorInfoArray))]),
    "nrt_free_model_tensor_info": (_STATUS, [ctypes.POINTER(_CTensorInfoArray)]),
    "nrt_tensor_allocate": (
        _STATUS,
        [ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p, _PP],
    ),
    "nrt_tensor_allocate_slice": (
        _STATUS,
        [_P, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_char_p, _PP],
    ),
    "nrt_tensor_free": (None, [_PP]),
    "nrt_tensor_read": (_STATUS, [_P, _P, ctypes.c_size_t, ctypes.c_size_t]),
    "nrt_tensor_write": (_STATUS, [_P, _P, ctypes.c_size_t, ctypes.c_size_t]),
    "nrt_tensor_copy": (_STATUS, [_P, ctypes.c_size_t, _P, ctypes.c_size_t, ctypes.c_size_t]),
    "nrt_allocate_tensor_set": (_STATUS, [_PP]),
    "nrt_destroy_tensor_set": (None, [_PP]),
    "nrt_add_tensor_to_tensor_set": (_STATUS, [_P, ctypes.c_char_p, _P]),
    "nrt_execute": (_STATUS, [_P, _P, _P]),
}


def _pointer(array: np.ndarray) -> int:
    """The address of a C-contiguous array's first byte: libnrt reads or writes it in place."""
    if not array.flags.c_contiguous:
        raise ValueError("libnrt transfers need a C-contiguous host array")
    return array.ctypes.data


class NrtLibrary:
    """libnrt, loaded with ctypes; every method checks the status and raises ``NrtError``."""

    def __init__(self, path: str):
        try:
            self._lib = ctypes.CDLL(path)
        except OSError as exc:
            raise LibnrtNotFoundError(
                f"cannot load libnrt from {path!r}: {exc}. Install aws-neuronx-runtime-lib (Neuron SDK) "
                f"or set {LIBRARY_ENV} to a working libnrt.so.1"
            ) from exc
        self.path = path
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(self._lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        self._initialized = False
        self._closed = False

    @classmethod
    def open(cls, path: str | None = None) -> NrtLibrary:
        """The process's ``NrtLibrary`` for ``path`` (default: ``find_library()``)."""
        path = path or find_library()
        if path is None:
            raise LibnrtNotFoundError(
                "libnrt.so was not found: install aws-neuronx-runtime-lib (Neuron SDK) on a Trainium "
                f"host, or set {LIBRARY_ENV} to the library's path"
            )
        return _open(os.path.realpath(path))

    # -- process lifetime ------------------------------------------------------------------

    def init(self) -> None:
        """``nrt_init`` once per process, with this rank's visible cores set first."""
        if self._initialized:
            return
        if self._closed:
            raise NkipyError(
                "libnrt was closed at interpreter exit; no device work can run after it"
            )
        visible = cores.assign_visible_cores(self.total_nc_count())
        if visible is not None:
            os.environ[cores.VISIBLE_CORES] = visible
        version = metadata.version("nkipy-runtime").encode()
        check("nrt_init", self._lib.nrt_init(FRAMEWORK_TYPE_NO_FW, version, version))
        self._initialized = True
        atexit.register(self.close)

    def close(self) -> None:
        """``nrt_close`` (registered at exit by ``init``); calling it again does nothing."""
        if self._initialized and not self._closed:
            self._lib.nrt_close()
            self._closed = True

    def total_nc_count(self) -> int:
        """NeuronCores on the machine; libnrt answers this before ``nrt_init``."""
        count = ctypes.c_uint32()
        check("nrt_get_total_nc_count", self._lib.nrt_get_total_nc_count(ctypes.byref(count)))
        return count.value

    # -- models ----------------------------------------------------------------------------

    def load(self, neff: bytes, vnc: int) -> int:
        """Load a NEFF onto visible core ``vnc``; the model handle."""
        self.init()
        model = ctypes.c_void_p()
        status = self._lib.nrt_load(
            neff, len(neff), vnc, _VNC_COUNT_DEPRECATED, ctypes.byref(model)
        )
        check("nrt_load", status, f"{len(neff)}-byte NEFF on core {vnc}")
        return model.value

    def unload(self, model: int) -> None:
        check("nrt_unload", self._lib.nrt_unload(model))

    def tensor_info(self, model: int) -> list[TensorInfo]:
        """The model's inputs and outputs, in the order libnrt lists them."""
        array = ctypes.POINTER(_CTensorInfoArray)()
        check(
            "nrt_get_model_tensor_info",
            self._lib.nrt_get_model_tensor_info(model, ctypes.byref(array)),
        )
        try:
            count = array.contents.tensor_count
            entries = (_CTensorInfo * count).from_address(
                ctypes.addressof(array.contents) + _CTensorInfoArray.tensor_array.offset
            )
            return [
                TensorInfo(e.name.decode(), e.usage, e.size, e.dtype, e.shape[: e.ndim])
                for e in entries
            ]
        finally:
            check("nrt_free_model_tensor_info", self._lib.nrt_free_model_tensor_info(array))

    def execute(self, model: int, inputs: Mapping[str, int], outputs: Mapping[str, int]) -> None:
        """Run a model on tensors bound by the NEFF's tensor names."""
        with self._tensor_set(inputs) as input_set, self._tensor_set(outputs) as output_set:
            check("nrt_execute", self._lib.nrt_execute(model, input_set, output_set))

    @contextmanager
    def _tensor_set(self, tensors: Mapping[str, int]) -> Iterator[int]:
        handle = ctypes.c_void_p()
        check("nrt_allocate_tensor_set", self._lib.nrt_allocate_tensor_set(ctypes.byref(handle)))
        try:
            for name, tensor in tensors.items():
                status = self._lib.nrt_add_tensor_to_tensor_set(handle, name.encode(), tensor)
                check("nrt_add_tensor_to_tensor_set", status, f"tensor {name!r}")
            yield handle.value
        finally:
            self._lib.nrt_destroy_tensor_set(ctypes.byref(handle))

    # -- tensors ---------------------------------------------------------------------------

    def allocate(self, nbytes: int, vnc: int, name: str) -> int:
        """A new device tensor of ``nbytes`` on visible core ``vnc``."""
        self.init()
        tensor = ctypes.c_void_p()
        status = self._lib.nrt_tensor_allocate(
            PLACEMENT_DEVICE, vnc, nbytes, name.encode(), ctypes.byref(tensor)
        )
        check("nrt_tensor_allocate", status, f"{nbytes} bytes on core {vnc}")
        return tensor.value

    def allocate_slice(self, source: int, offset: int, nbytes: int, name: str) -> int:
        """A tensor aliasing ``nbytes`` of ``source`` from byte ``offset`` (no copy)."""
        tensor = ctypes.c_void_p()
        status = self._lib.nrt_tensor_allocate_slice(
            source, offset, nbytes, name.encode(), ctypes.byref(tensor)
        )
        check("nrt_tensor_allocate_slice", status, f"{nbytes} bytes at offset {offset}")
        return tensor.value

    def free(self, tensor: int) -> None:
        self._lib.nrt_tensor_free(ctypes.byref(ctypes.c_void_p(tensor)))

    def write(self, tensor: int, host: np.ndarray, offset: int) -> None:
        """Copy a C-contiguous host array into the tensor from byte ``offset``, reading it in place."""
        status = self._lib.nrt_tensor_write(tensor, _pointer(host), offset, host.nbytes)
        check("nrt_tensor_write", status, f"{host.nbytes} bytes at offset {offset}")

    def read(self, tensor: int, out: np.ndarray, offset: int) -> None:
        """Fill a C-contiguous host array from the tensor at byte ``offset``, writing it in place."""
        status = self._lib.nrt_tensor_read(tensor, _pointer(out), offset, out.nbytes)
        check("nrt_tensor_read", status, f"{out.nbytes} bytes at offset {offset}")

    def copy(self, src: int, src_offset: int, dst: int, dst_offset: int, nbytes: int) -> None:
        """Device-to-device copy of ``nbytes`` (libnrt requires both tensors on one core)."""
        status = self._lib.nrt_tensor_copy(src, src_offset, dst, dst_offset, nbytes)
        check("nrt_tensor_copy", status, f"{nbytes} bytes from offset {src_offset} to {dst_offset}")


@functools.cache
def _open(realpath: str) -> NrtLibrary:
    return NrtLibrary(realpath)
