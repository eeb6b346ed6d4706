"""The one place that touches jaxlib's private APIs: StableHLO -> ``HloModuleProto``, and
compiling and running StableHLO on an XLA device (the ``xla`` runtime).

``neuronx-cc compile --framework XLA`` reads a serialized ``HloModuleProto``. jaxlib is the
well-kept library that converts StableHLO to it, but only through
``jax._src.lib.xla_client._xla.mlir.mlir_module_to_xla_computation``, which is private and has
moved between releases; so have the client's ``compile_and_load`` and ``execute_sharded``. This
module checks the installed version once and turns every failure into a ``HloConversionError``
(or ``XlaCompileError``) that says what to install or what went wrong.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from nkipy_core.errors import NkipyError

#: jaxlib releases whose private conversion entry point this module was checked against
SUPPORTED_JAXLIB = ((0, 4, 30), (0, 11, 0))  # [lowest, first unsupported)


class HloConversionError(NkipyError):
    """StableHLO could not be turned into an ``HloModuleProto``."""


class XlaCompileError(NkipyError):
    """XLA rejected a StableHLO module it was asked to compile."""


@attrs.frozen
class HloModule:
    """One kernel's HLO: the serialized proto ``neuronx-cc`` reads, and its text for people."""

    proto: bytes
    text: str


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:3] if p.isdigit())


@functools.cache
def _mlir_bindings() -> Any:
    try:
        import jaxlib
        from jax._src.lib import xla_client
    except ImportError as exc:
        raise HloConversionError(
            f"turning kernels into HLO needs jax and jaxlib ({exc}); "
            "install them with `pip install 'nkipy-runtime[xla]'`"
        ) from None
    found = _version(jaxlib.__version__)
    low, high = SUPPORTED_JAXLIB
    if not low <= found < high:
        raise HloConversionError(
            f"jaxlib {jaxlib.__version__} is not supported for HLO conversion (need >= "
            f"{'.'.join(map(str, low))}, < {'.'.join(map(str, high))}); install a jaxlib in that range"
        )
    mlir = getattr(getattr(xla_client, "_xla", None), "mlir", None)
    if mlir is None or not hasattr(mlir, "mlir_module_to_xla_computation"):
        raise HloConversionError(
            f"jaxlib {jaxlib.__version__} lacks mlir_module_to_xla_computation; install a jaxlib in "
            f"the supported range {SUPPORTED_JAXLIB}"
        )
    return mlir


def available() -> tuple[bool, str]:
    """(True, jaxlib version) or (False, why HLO conversion cannot work here)."""
    try:
        _mlir_bindings()
    except HloConversionError as exc:
        return False, str(exc)
    import jaxlib

    return True, f"jaxlib {jaxlib.__version__}"


def to_hlo(stablehlo: str) -> HloModule:
    """Convert a StableHLO module; a malformed module raises ``HloConversionError`` with the
    parser's message (which names the line)."""
    mlir = _mlir_bindings()
    try:
        computation = mlir.mlir_module_to_xla_computation(
            stablehlo, use_tuple_args=False, return_tuple=False
        )
    except Exception as exc:  # noqa: BLE001 - jaxlib raises its own untyped errors
        raise HloConversionError(f"jaxlib rejected the StableHLO module: {exc}") from None
    return HloModule(computation.as_serialized_hlo_module_proto(), _text(computation))


def _text(computation: Any) -> str:
    """The module's HLO text with each instruction's metadata (the ATen op and rule it came
    from, for people and for the Neuron profile check) and every constant written out (the check
    reads their values)."""
    from jaxlib import _hlo

    options = _hlo.HloPrintOptions()
    options.print_metadata = True
    options.print_large_constants = True
    return computation.get_hlo_module().to_string(options)


def devices(platform: str = "cpu") -> list[Any]:
    """The XLA devices of ``platform``: the CPU devices of nkipy's own CPU client
    (``_cpu_client``), else those jax sees (``gpu``)."""
    _mlir_bindings()
    if platform == "cpu":
        return list(_cpu_client().local_devices())
    import jax

    return list(jax.devices(platform))


@functools.cache
def _cpu_client() -> Any:
    """An XLA CPU client of nkipy's own that runs each executable on the calling thread.

    jax's CPU client hands an execution to a worker thread and the caller waits for it; a
    worker that has slept since the last call takes about 40 us to wake, which is more than a
    small kernel computes (a Llama block of 2 x 16 x 64: 0.12 ms) and is paid at every kernel
    call, since nkipy waits for each result. A synchronous client pays nothing between calls
    (measured: 50 us against 9 us per call of a one-op kernel when 50 us pass between calls).
    It is a client of its own, so the user's jax keeps its asynchronous dispatch; jax computes
    on its devices as on its own (the ``xla`` runtime's device-memory helpers do). XLA's flags
    (``XLA_FLAGS``, e.g. the CPU device count) apply to it as to jax's."""
    from jax._src.lib import xla_client

    return xla_client.make_cpu_client(asynchronous=False)


#: borrowed uploads an ``Uploader`` keeps for arrays that come back (``Uploader.__call__``)
KEPT_UPLOADS = 4096


class Uploader:
    """Copies host arrays of fixed types onto ``device`` as XLA arrays of exactly those types.

    ``jax.device_put`` costs about 30 us per array and narrows 64-bit types unless jax's x64
    mode is on; the client's ``batched_device_put`` that it wraps takes a few microseconds and is
    told the type outright (an abstract value, built once per type here). By default the copy is
    forced, so later writes to a host array (a torch tensor's memory) never reach the device
    array; ``borrow=True`` lets an XLA CPU device use suitably aligned host memory in place, for
    arrays that live only while one kernel runs (``execute`` waits for it).
    """

    def __init__(self, device: Any):
        _mlir_bindings()
        import jax
        from jax._src.lib import xla_client

        self._device = device
        self._sharding = jax.sharding.SingleDeviceSharding(device)
        self._put = xla_client.batched_device_put
        self._semantics = xla_client.HostBufferSemantics
        self._shaped = jax.core.ShapedArray
        self._avals: dict[tuple, Any] = {}
        #: id(host) -> (host, its borrowed XLA array), oldest first (see ``__call__``)
        self._kept: dict[int, tuple[np.ndarray, Any]] = {}
        #: address -> the owner of a result handed out in place (``host_result``), while it lives
        self._results: weakref.WeakValueDictionary[int, _Owner] = weakref.WeakValueDictionary()

    def __call__(self, hosts: Sequence[np.ndarray], borrow: bool = False) -> list[Any]:
        """XLA arrays of ``hosts``.

        A borrowed upload of an array that owns no memory and refers to nothing that does (a
        view over memory kept alive elsewhere: the views ``HostViews`` keeps of a compiled
        graph's parameters between calls) is kept, and handed out again when the same array
        object comes back. It reads the memory in place, so it holds what the memory holds
        then, and keeping it keeps no tensor alive. A model's parameters are then uploaded once,
        not at every call (EfficientNet-B0's forward: 250 arrays, 1.6 ms of 11 ms a call).

        A host array that is a result ``host_result`` handed out in place, whole and of the
        same type (an activation the next kernel reads, one a training step saves for its
        backward), is given back as that XLA array: it is the same memory, so nothing is
        uploaded."""
        if not borrow:
            return [
                self._upload(host, self._semantics.IMMUTABLE_ONLY_DURING_CALL) for host in hosts
            ]
        kept, results, arrays = self._kept, self._results, []
        for host in hosts:
            entry = kept.get(id(host))
            if entry is not None and entry[0] is host:
                arrays.append(entry[1])
                continue
            address = host.ctypes.data
            owner = results.get(address)
            if owner is not None and owner.shape == host.shape and owner.dtype == host.dtype:
                arrays.append(owner.array)
                continue
            array = self._upload(host, self._semantics.ZERO_COPY)
            if _owns_nothing(host) and array.unsafe_buffer_pointer() == address:
                if len(kept) >= KEPT_UPLOADS:
                    del kept[next(iter(kept))]
                kept[id(host)] = (host, array)
            arrays.append(array)
        return arrays

    def host_result(self, array: Any) -> np.ndarray:
        """A kernel result on this XLA CPU device as writable host memory of its own.

        A result is a fresh buffer that nothing else reads, so a large one is handed out where
        it lies, as a writable view (a backward kernel's gradients are megabytes: a copy of each
        costs as much as a fifth of the kernel), and remembered, so that ``__call__`` hands the
        array itself to a kernel that reads it; a small one is copied, which costs less than
        the view."""
        dtype = np.dtype(array.dtype)
        if array.size * dtype.itemsize < VIEW_MIN_BYTES:
            return np.array(array)
        array.block_until_ready()  # a client may write its buffers asynchronously
        owner = _Owner(array, dtype)
        self._results[owner.__array_interface__["data"][0]] = owner
        return np.asarray(owner).view(dtype)

    def _upload(self, host: np.ndarray, semantics: Any) -> Any:
        key = (host.shape, host.dtype)
        aval = self._avals.get(key)
        if aval is None:
            aval = self._avals[key] = self._shaped(host.shape, host.dtype)
        forced = semantics is not self._semantics.ZERO_COPY
        return self._put(
            aval, self._sharding, [host], [self._device], True, forced, semantics, True
        )


def _owns_nothing(host: np.ndarray) -> bool:
    """Whether ``host`` is a view over memory it does not keep alive: its base is a ctypes array
    made over an address (``_b_needsfree_`` false: it did not allocate its memory)."""
    base = host.base
    return isinstance(base, ctypes.Array) and not base._b_needsfree_ and host.size > 0


#: the XLA pass that removes ``stablehlo.optimization_barrier``s, disabled for CPU executables
KEPT_BARRIERS = "cse_barrier_expander"


def compile_stablehlo(stablehlo: str, device: Any) -> Any:
    """An XLA executable of ``stablehlo`` loaded on ``device``."""
    return compile_replicated(stablehlo, [device])


def compile_replicated(stablehlo: str, devices: Sequence[Any]) -> Any:
    """An XLA executable of ``stablehlo`` with one replica per device, replica i on
    ``devices[i]``: the replica ids its collectives' ``replica_groups`` name. (A CPU host shows
    several devices only with ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` set before
    jax initialises.)"""
    _mlir_bindings()
    from jax._src.lib import xla_client

    options = xla_client.CompileOptions()
    options.num_replicas = len(devices)
    options.device_assignment = xla_client.DeviceAssignment.create(
        np.array([[d.id] for d in devices])
    )
    if devices[0].platform == "cpu":
        # XLA's CPU pipeline drops optimization barriers before fusion ("cse_barrier_expander");
        # kept, they stop it from recomputing a value inside each of its consumers (see
        # ``stablehlo/convolution.py``). Only this executable's options change.
        options.executable_build_options.debug_options.xla_disable_hlo_passes = KEPT_BARRIERS
    try:
        return devices[0].client.compile_and_load(
            stablehlo.encode(),
            executable_devices=xla_client.DeviceList(tuple(devices)),
            compile_options=options,
        )
    except Exception as exc:  # noqa: BLE001 - jaxlib raises its own untyped errors
        raise XlaCompileError(f"XLA could not compile the kernel: {exc}") from None


def execute_replicated(
    executable: Any, devices: Sequence[Any], inputs: Sequence[Sequence[np.ndarray]]
) -> list[list[np.ndarray]]:
    """Run a ``compile_replicated`` executable: ``inputs[i]`` are replica i's arguments; returns
    each replica's outputs on the host. Each argument goes in as one jax array whose shards are
    the replicas' values, marked replicated (the type jax has for "one buffer per device")."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    sharding = NamedSharding(Mesh(np.array(devices), ("replica",)), PartitionSpec())
    uploads = [
        Uploader(d)([np.asarray(a) for a in args]) for d, args in zip(devices, inputs, strict=True)
    ]
    arguments = []
    for shards in zip(*uploads):
        arguments.append(
            jax.make_array_from_single_device_arrays(shards[0].shape, sharding, shards)
        )
    outputs = executable.execute_sharded(arguments).disassemble_into_single_device_arrays()
    return [[np.asarray(out[i]) for out in outputs] for i in range(len(devices))]


#: results from this size on are handed out in place rather than copied (``Uploader.host_result``)
VIEW_MIN_BYTES = 1 << 16


class _Owner:
    """The ``base`` of a NumPy view of an XLA CPU array's buffer: holds the array (so the buffer
    lives as long as the view and whatever is made of it) and describes the buffer to NumPy."""

    __slots__ = ("array", "shape", "dtype", "__array_interface__", "__weakref__")

    def __init__(self, array: Any, dtype: np.dtype):
        self.array = array
        self.shape = tuple(array.shape)
        self.dtype = dtype
        self.__array_interface__ = {
            "shape": self.shape,
            "typestr": f"|u{dtype.itemsize}",
            "data": (array.unsafe_buffer_pointer(), False),
            "version": 3,
        }


def execute(executable: Any, arrays: list[Any]) -> list[Any]:
    """Run an executable on jax arrays (one per parameter); its outputs as new jax arrays, once
    they are computed. XLA runs asynchronously; waiting here makes the ``xla`` runtime as
    synchronous as the others, so a timed call includes its kernel and an error surfaces at
    the op that caused it."""
    results = executable.execute_sharded(arrays)
    outputs = [outs[0] for outs in results.disassemble_into_single_device_arrays()]
    for output in outputs:
        output.block_until_ready()
    return outputs
