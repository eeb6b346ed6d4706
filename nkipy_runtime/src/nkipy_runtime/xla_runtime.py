"""The ``xla`` runtime: kernels as StableHLO, compiled and run by XLA on this machine.

It runs exactly the module ``neuronx-cc`` would be given, so it is both a second, compiled
execution path for everyone without Trainium and the oracle that checks the HLO against the
``cpu`` runtime. Device buffers are XLA buffers (``XlaBuffer``): kernels take and return them
without any host round trip, and only ``to_device``/``to_host`` count as transfers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nkipy_core.ir import DType, Kernel
from nkipy_core.runtime import (
    CompileOptions,
    DeviceArray,
    DeviceStats,
    Signature,
    contiguous_strides,
)

from . import xla_bridge
from .hlo_files import STABLEHLO, hlo_artifacts


def _exact_types(method):
    """Run ``method`` with jax's 64-bit types on: without it jax silently narrows i64, u64 and
    f64 arrays to 32 bits. The setting is jax's context-local one, so the user's own jax code
    keeps whatever it chose."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import jax

        with jax.enable_x64(True):
            return method(*args, **kwargs)

    return wrapper


class XlaExecutable:
    def __init__(self, artifacts: Mapping[str, bytes], signature: Signature, device: Any):
        self._artifacts = dict(artifacts)
        self.signature = signature
        self.compiled = xla_bridge.compile_stablehlo(self._artifacts[STABLEHLO].decode(), device)

    def artifacts(self) -> Mapping[str, bytes]:
        return self._artifacts


class XlaBuffer:
    """``nbytes`` of device memory whose contents are one XLA array (``None`` until written).

    XLA arrays are immutable, so a write replaces ``array``; a kernel output is adopted as it
    is, typed and shaped, so the next kernel reads it without any conversion.
    """

    __slots__ = ("array", "nbytes", "whole")

    def __init__(self, nbytes: int, array: Any = None):
        self.nbytes = nbytes
        self.array = array
        #: ``(view, array)`` of the last read that took ``array`` as it is (``_read``)
        self.whole: tuple[DeviceArray, Any] | None = None


class XlaRuntime:
    """Runs kernels on the first device of jax's default backend: a GPU where jaxlib sees one,
    else the CPU, through nkipy's own synchronous client (``xla_bridge._cpu_client``)."""

    name = "xla"
    priority = -10  # below cpu until the figures say otherwise (see docs/runtimes.md)
    hardware = False  # XLA stands in for the accelerator; torch sees nkipy only on request
    # no kernel_collectives: one process's XLA client has no peers (replicas in one process are
    # what xla_bridge.compile_replicated tests the emitted collectives with)

    def __init__(self) -> None:
        self.stats = DeviceStats()

    def available(self) -> tuple[bool, str]:
        ok, reason = xla_bridge.available()
        return (True, "") if ok else (False, reason)

    def describe(self) -> str:
        import jax
        import jaxlib

        return f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, device {self.device}"

    @functools.cached_property
    def device(self) -> Any:
        import jax

        return xla_bridge.devices(jax.default_backend())[0]

    def compile(self, kernel: Kernel, options: CompileOptions) -> XlaExecutable:
        artifacts = hlo_artifacts(kernel, xla_cpu=True)  # XLA CPU's fastest forms
        return XlaExecutable(artifacts, Signature.of(kernel), self.device)

    def load(
        self, artifacts: Mapping[str, bytes], signature: Signature, options: CompileOptions
    ) -> XlaExecutable:
        return XlaExecutable(artifacts, signature, self.device)

    # -- device memory ---------------------------------------------------------------------

    def allocate(self, nbytes: int) -> XlaBuffer:
        self.stats.allocate(nbytes)
        return XlaBuffer(nbytes)

    def free(self, buffer: XlaBuffer) -> None:
        self.stats.free(buffer.nbytes)
        buffer.array = None

    @_exact_types
    def to_device(self, host: np.ndarray, dst: DeviceArray) -> None:
        self.stats.host_to_device += 1
        self.stats.host_to_device_bytes += dst.nbytes
        self._write(dst, self._put(np.ascontiguousarray(host, dtype=dst.dtype.numpy)))

    @_exact_types
    def to_host(self, src: DeviceArray) -> np.ndarray:
        self.stats.device_to_host += 1
        self.stats.device_to_host_bytes += src.nbytes
        return np.array(self._read(src))

    @_exact_types
    def copy(self, src: DeviceArray, dst: DeviceArray) -> None:
        self._write(dst, self._read(src))

    @_exact_types
    def run(self, executable: XlaExecutable, inputs: Sequence[DeviceArray]) -> list[DeviceArray]:
        outputs = xla_bridge.execute(executable.compiled, [self._read(a) for a in inputs])
        arrays = []
        for out, type_ in zip(outputs, executable.signature.outputs):
            nbytes = type_.size * type_.dtype.numpy.itemsize
            self.stats.allocate(nbytes)
            arrays.append(DeviceArray.contiguous(XlaBuffer(nbytes, out), type_))
        return arrays

    def run_host(self, executable: XlaExecutable, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Host arrays in, host arrays out, for graphs of CPU tensors, without the buffer
        bookkeeping of ``run``. An XLA CPU device reads aligned inputs where they are and
        hands out its results as host memory (``Uploader.host_result``); on another device
        the copies are transfers and are counted as such. An input whose dtype is not the
        kernel's (torch's meta functions and CPU kernels disagree on a few ops, e.g. the bf16
        ``_native_batch_norm_legit`` statistics) is converted to the kernel's, as staging it
        into a device buffer would."""
        hosts = [
            np.ascontiguousarray(a, dtype=t.dtype.numpy)
            for a, t in zip(arrays, executable.signature.inputs)
        ]
        inputs = self._upload(hosts, borrow=True)
        results = xla_bridge.execute(executable.compiled, inputs)
        if self.device.platform == "cpu":
            return [self._upload.host_result(o) for o in results]
        outputs = [np.array(o) for o in results]
        self.stats.host_to_device += len(inputs)
        self.stats.host_to_device_bytes += sum(a.nbytes for a in arrays)
        self.stats.device_to_host += len(outputs)
        self.stats.device_to_host_bytes += sum(o.nbytes for o in outputs)
        return outputs

    # -- layouts: torch's strided views over XLA's dense arrays ----------------------------

    @functools.cached_property
    def _upload(self) -> xla_bridge.Uploader:
        return xla_bridge.Uploader(self.device)

    def _put(self, host: np.ndarray) -> Any:
        return self._upload([host])[0]

    def _read(self, view: DeviceArray) -> Any:
        """The values of ``view`` as a dense XLA array of its shape (on the device).

        A view that reads its buffer's array as it is (whole, same shape) is remembered with
        that array: the same view object comes back at every kernel call that reads a weight
        (``memory.array`` hands it out again), and comparing two identities costs a tenth of
        checking the layout against jax's array (about 3 us, for each input of each call). A
        reshaped read is not remembered: XLA may copy to reshape, and the copy would live on."""
        buffer: XlaBuffer = view.buffer
        array = buffer.array
        whole = buffer.whole
        if whole is not None and whole[0] is view and whole[1] is array:
            return array
        if array is not None and _is_whole(view, array):
            if array.shape != view.shape:
                return array.reshape(view.shape)
            buffer.whole = (view, array)
            return array
        return _gather(self._flat(buffer, view.dtype), view.shape, view.strides, view.offset)

    def _write(self, view: DeviceArray, values: Any) -> None:
        """Store dense ``values`` (of ``view``'s shape and dtype) into ``view``."""
        buffer: XlaBuffer = view.buffer
        if view.nbytes == buffer.nbytes and _is_contiguous(view):
            buffer.array = values
            return
        flat = self._flat(buffer, view.dtype)
        flat = _scatter(flat, values, view.shape, view.strides, view.offset)
        buffer.array = (
            flat
            if flat.size * view.dtype.numpy.itemsize == buffer.nbytes
            else self._merge(buffer, flat)
        )

    def _flat(self, buffer: XlaBuffer, dtype: DType) -> Any:
        """The buffer as a 1-D array of ``dtype`` (as many whole elements as fit)."""
        import jax.numpy as jnp

        if buffer.array is None:
            buffer.array = jnp.zeros(buffer.nbytes, dtype=np.uint8, device=self.device)
        array = buffer.array
        if array.dtype == dtype.numpy:
            return array.reshape(-1)
        return _retype(_to_bytes(array), dtype.numpy.itemsize, dtype.numpy)

    def _merge(self, buffer: XlaBuffer, flat: Any) -> Any:
        """``flat`` written over the start of the buffer's bytes (when elements of its type do not
        fill the buffer exactly, the tail bytes are kept)."""
        old = _to_bytes(buffer.array)
        new = _to_bytes(flat)
        return old.at[: new.size].set(new)


@functools.lru_cache(maxsize=1024)
def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(contiguous_strides(shape))


def _is_contiguous(view: DeviceArray) -> bool:
    return view.offset == 0 and (
        math.prod(view.shape) <= 1 or view.strides == _row_major(view.shape)
    )


def _is_whole(view: DeviceArray, array: Any) -> bool:
    """``view`` reads all of ``array``, in order and with its element type."""
    return (
        array.dtype == view.dtype.numpy
        and array.size == math.prod(view.shape)
        and _is_contiguous(view)
    )


@functools.cache
def _layout_kernels() -> tuple[Any, Any]:
    """Jitted gather and scatter of strided layouts (jax imported on first use only)."""
    import jax

    def gather(flat: Any, shape: tuple, strides: tuple, offset: int) -> Any:
        return flat[_indices(shape, strides, offset)]

    def scatter(flat: Any, values: Any, shape: tuple, strides: tuple, offset: int) -> Any:
        return flat.at[_indices(shape, strides, offset)].set(values.astype(flat.dtype))

    return jax.jit(gather, static_argnums=(1, 2, 3)), jax.jit(scatter, static_argnums=(2, 3, 4))


def _gather(flat: Any, shape: tuple, strides: tuple, offset: int) -> Any:
    return _layout_kernels()[0](flat, tuple(shape), tuple(strides), offset)


def _scatter(flat: Any, values: Any, shape: tuple, strides: tuple, offset: int) -> Any:
    return _layout_kernels()[1](flat, values, tuple(shape), tuple(strides), offset)


def _indices(shape: tuple, strides: tuple, offset: int) -> np.ndarray:
    """Element indices of a strided layout, computed while tracing (shapes are static)."""
    index = np.full(shape, offset, dtype=np.int64)
    for axis, (size, stride) in enumerate(zip(shape, strides)):
        view = [1] * len(shape)
        view[axis] = size
        index = index + (np.arange(size, dtype=np.int64) * stride).reshape(view)
    return index


def _to_bytes(array: Any) -> Any:
    import jax

    if array.dtype == np.uint8:
        return array.reshape(-1)
    if array.dtype == np.bool_:  # XLA cannot bitcast pred; its bytes are 0 and 1, as NumPy's
        return array.reshape(-1).astype(np.uint8)
    return jax.lax.bitcast_convert_type(array.reshape(-1), np.uint8).reshape(-1)


def _retype(data: Any, itemsize: int, dtype: np.dtype) -> Any:
    import jax

    count = data.size // itemsize
    words = data[: count * itemsize]
    if dtype == np.bool_:
        return words != 0
    if itemsize == 1:
        return jax.lax.bitcast_convert_type(words, dtype)
    return jax.lax.bitcast_convert_type(words.reshape(count, itemsize), dtype)
