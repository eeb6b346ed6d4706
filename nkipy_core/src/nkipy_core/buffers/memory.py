"""Device tensors: torch tensors on the ``nkipy`` device whose storage is a runtime buffer.

A tensor on ``nkipy`` is an ordinary torch tensor (PrivateUse1 dispatch key, sizes, strides,
storage offset) whose storage's data pointer is a placeholder address. The runtime buffer behind
it hangs off the storage object, so views, ``detach``, ``nn.Parameter`` and autograd, which all share the storage,
share the buffer too; the buffer is freed when torch frees the storage. Only the runtime knows
what a buffer is: this module hands it ``DeviceArray`` descriptions and never touches the bytes.

A complex tensor's buffer holds its real and imaginary parts interleaved, as on CPU; the runtime
sees it as its real view (``value_type``: ``complex64[n]`` is ``f32[n x 2]``), so runtimes and
kernels need know nothing of complex numbers. Torch's conjugate and negative bits (``x.conj()``,
``x.conj().imag``) are views that leave the buffer as it is: transfers apply them (``to_host``,
``write``), and ``raw`` gives the bytes as they are stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import torch

from nkipy_core import _torch
from nkipy_core.buffers import device_contract
from nkipy_core.buffers.device_contract import NAME
from nkipy_core.config import settings
from nkipy_core.errors import (
    ConfigurationError,
    DeviceError,
    RuntimeNotFoundError,
    RuntimeUnavailableError,
)
from nkipy_core.ir.types import DType, numpy_to_torch, torch_to_numpy, value_type
from nkipy_core.runtime.base import DeviceArray, contiguous_strides

_ATTR = "_nkipy_allocation"
_CPU = _torch.DispatchKeySet(_torch.DispatchKey.CPU)

_runtime = None


def runtime():
    """The runtime that owns device memory: chosen at first use, then fixed for the process
    (tensors already allocated cannot move to another runtime). Choosing it runs the device's
    first-use work (``device_contract.on_first_use``)."""
    global _runtime
    if _runtime is None:
        try:
            config = settings.current()
            selected = settings.select_runtime(config)
        except (RuntimeNotFoundError, RuntimeUnavailableError) as exc:
            raise type(exc)(f"the nkipy device cannot be used: {exc}") from None
        device_contract.first_use(config)
        selected.stats.limit = config.memory_limit
        _runtime = selected
        global _configured_limit
        _configured_limit = config.memory_limit
    return _runtime


def _keeps_its_runtime(config: settings.Config, chosen) -> None:
    """The device keeps the runtime of its first tensors: a configuration that names another
    one is refused (checked by the configuration layer, which does not import this one)."""
    if config.runtime is not None and _runtime is not None and _runtime.name != chosen.name:
        raise ConfigurationError(
            f"the nkipy device already holds tensors on runtime {_runtime.name!r} (chosen at its "
            f"first use, with the default settings), so it cannot switch to {chosen.name!r}; call "
            f"init_nkipy_backend(runtime={chosen.name!r}) before the first use of the device."
        )


#: the memory limit the configuration last gave the device
_configured_limit: int | None = None


def _holds_its_memory_to(config: settings.Config, chosen) -> None:
    """A configuration that changes ``memory_limit`` sets the device's limit at once (at its
    first use when it has none yet); one that keeps it leaves a limit set since
    (``torch.nkipy.set_per_process_memory_fraction``) alone. Registered after
    ``_keeps_its_runtime``, which may refuse the configuration first."""
    global _configured_limit
    if _runtime is not None and config.memory_limit != _configured_limit:
        _runtime.stats.limit = _configured_limit = config.memory_limit


settings.on_apply(_keeps_its_runtime)
settings.on_apply(_holds_its_memory_to)


#: told of each storage whose bytes are about to be read or written outside a kernel of the
#: queued eager ops (``device/fusion.py``), while ops are queued; ``None`` otherwise
_watcher: Callable[[_Allocation], None] | None = None


def watch(watcher: Callable[[_Allocation], None] | None) -> None:
    """Call ``watcher(allocation)`` before a storage's bytes are used (``None``: stop). The eager
    queue sits above this layer: it runs its queued ops first when they touch that storage."""
    global _watcher
    _watcher = watcher


def allocation_of(t: torch.Tensor) -> _Allocation | None:
    """The allocation of a device tensor's storage (``None`` for a storage torch made from a
    data pointer on its own)."""
    return getattr(t.untyped_storage(), _ATTR, None)


def pending(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """A new contiguous device tensor whose buffer a later kernel gives (``adopt_result``): the
    result of a queued eager op, which takes no device memory until it is computed."""
    strides = contiguous_strides(shape)
    nbytes = _span(shape, strides, 0, dtype.itemsize)
    stats = runtime().stats
    stats.allocate(nbytes)  # counted (and refused past the limit) now, as a buffer would be
    t = _tensor(None, nbytes, dtype, shape, strides)
    getattr(t.untyped_storage(), _ATTR).reserved = nbytes
    return t


def release(allocation: _Allocation) -> None:
    """Stop counting the bytes reserved for a queued op's result (``pending``): its buffer is
    about to be made (and counted), or it will never be."""
    if allocation.reserved:
        allocation.owner.stats.free(allocation.reserved)
        allocation.reserved = 0


def adopt_result(allocation: _Allocation, nbytes: int, result: torch.Tensor) -> bool:
    """Make ``result``'s buffer the buffer of ``allocation``'s storage (of ``nbytes`` bytes),
    freeing the one it had, if ``result`` (a kernel's new output, used for nothing else) covers
    exactly those bytes, row-major; ``False`` (nothing done) otherwise. No byte is copied."""
    source = allocation_of(result)
    if (
        source is None
        or source.buffer is None
        or not result.is_contiguous()
        or result.storage_offset() != 0
        or result.untyped_storage().nbytes() != nbytes
    ):
        return False
    result.untyped_storage().__dict__.pop(_ATTR)
    buffer, source.buffer = source.buffer, None
    _by_address.pop(source.address, None)
    old, allocation.buffer = allocation.buffer, buffer
    allocation.array = None
    _by_address[allocation.address] = buffer
    if old is not None:
        allocation.owner.free(old)
    return True


def fill(allocation: _Allocation, shape: Sequence[int], dtype: torch.dtype, source) -> None:
    """Write ``source`` (a device or CPU tensor of ``shape`` and ``dtype``) into the storage of
    ``allocation``, row-major from its start; a storage without a buffer gets one."""
    if allocation.buffer is None:
        nbytes = _span(shape, contiguous_strides(shape), 0, dtype.itemsize)
        release(allocation)
        allocation.buffer = runtime().allocate(nbytes)
        _by_address[allocation.address] = allocation.buffer
    dtype_ = _DTYPES[dtype]
    assert dtype_ is not None, "complex values are not written whole"
    target = DeviceArray(allocation.buffer, dtype_, tuple(shape), contiguous_strides(shape), 0)
    if source.is_cpu:
        runtime().to_device(torch_to_numpy(source.contiguous()), target)
    else:
        runtime().copy(array(source), target)


def is_nkipy(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == NAME


class _Allocation:
    """A runtime buffer owned by one torch storage; freed with it.

    It lives in the storage's ``__dict__`` and nowhere else, so it dies when torch frees the
    storage (torch keeps a storage's Python object, and with it the attribute, for as long as
    the storage lives): ``__del__`` frees the buffer then, as a ``weakref.finalize`` on the
    storage would, at a third of the cost of registering one (every eager op's result makes
    one). At interpreter exit nothing is freed: the runtime's memory goes with the process."""

    __slots__ = ("buffer", "address", "owner", "array", "reserved", "__weakref__")

    def __init__(self, buffer, address: int, owner):
        self.buffer = buffer
        self.address = address
        self.owner = owner
        #: bytes counted in the runtime's memory statistics for a buffer a queued op will get
        #: (``pending``): they count, and hold the limit, from the op on, as a buffer would
        self.reserved = 0
        #: the last ``DeviceArray`` made of this buffer (``array``): the same tensor is passed
        #: to kernel after kernel, and making one is most of the cost of passing it
        self.array: DeviceArray | None = None
        _by_address[address] = buffer

    def __del__(self) -> None:
        _by_address.pop(self.address, None)
        if self.buffer is not None:  # a queued op's result that was never computed has none
            self.owner.free(self.buffer)
        release(self)


class DeviceStorage(torch.UntypedStorage):
    """The class of the storages of device tensors: a torch ``UntypedStorage`` whose ``clone``
    and ``copy.deepcopy`` copy on the device. torch's own would allocate through the C++
    allocator of the storage's device, which a device registered from Python does not have.
    Only nkipy's storages are of this class: torch's ``UntypedStorage`` is left as it is."""

    def clone(self) -> DeviceStorage:
        return clone_storage(self)

    def resize_(self, size: int) -> DeviceStorage:
        """``storage.resize_(nbytes)`` on the device (``resize_storage``): FSDP2 frees unsharded
        parameters with ``resize_(0)`` and brings them back with ``resize_(n)``."""
        resize_storage(self, size)
        return self

    def __deepcopy__(self, memo: dict) -> torch.UntypedStorage:
        """What deepcopying a device tensor does (``_StorageBase.__deepcopy__``, copying on the
        device). The copy's class is torch's own, as torch insists on when it wraps it; the
        device's ``set_`` kernel, which puts it under the new tensor, makes it a
        ``DeviceStorage`` again (``adopt``)."""
        memo = memo.setdefault("torch", {})
        if self._cdata not in memo:
            copy: torch.UntypedStorage = clone_storage(self)
            copy.__class__ = torch.UntypedStorage
            memo[self._cdata] = copy
        return memo[self._cdata]


def adopt(storage: torch.UntypedStorage) -> None:
    """Make a device storage that torch made a ``DeviceStorage`` (a deepcopy's, one made from a
    data pointer); other storages are left alone."""
    if type(storage) is torch.UntypedStorage and storage.device.type == NAME:
        storage.__class__ = DeviceStorage


#: buffers by their storage's placeholder address, for storages torch makes from a data pointer
#: on its own (the legacy serializer, storage slices): they alias memory but not our attribute
_by_address: dict[int, object] = {}
_next_address = 1 << 44


def _storage(buffer, nbytes: int) -> DeviceStorage:
    """A torch storage standing for ``buffer``. Torch wants a data pointer (it keys storages by
    it, e.g. in ``torch.save``); it gets a unique address that is never dereferenced: no kernel
    of this device reads storage memory, and torch's own CPU kernels are only used for views."""
    global _next_address
    address, _next_address = _next_address, _next_address + ((nbytes + 127) // 64) * 64
    storage = _torch.storage_from_data_pointer(address, torch.device(NAME, 0), nbytes)
    storage.__class__ = DeviceStorage
    setattr(storage, _ATTR, _Allocation(buffer, address, _runtime or runtime()))
    return cast(DeviceStorage, storage)  # its class, set above


def _buffer(storage: torch.UntypedStorage):
    allocation = getattr(storage, _ATTR, None)
    if allocation is not None:
        if _watcher is not None:
            _watcher(allocation)
        return _held(allocation)
    address = storage.data_ptr()
    base = max((a for a in _by_address if a <= address), default=None)
    if base is None and storage.nbytes() == 0:
        raise DeviceError(
            "this nkipy tensor's storage holds no memory: it was resized to 0 bytes "
            "(storage.resize_(0), as FSDP2 does to free unsharded parameters). Resize it back "
            "(tensor.untyped_storage().resize_(nbytes)) before using the tensor."
        )
    if base is None:
        raise DeviceError(f"no nkipy buffer backs storage at {address:#x}")
    if base != address:
        raise DeviceError(
            "views into the middle of a nkipy storage object are not supported; use tensor views"
        )
    return _by_address[base]


def _held(allocation: _Allocation):
    """The allocation's buffer; a typed error for a queued op's result that never got one."""
    if allocation.buffer is None:
        raise DeviceError(
            "this nkipy tensor has no value: it is the result of a queued eager op whose kernel "
            "failed (the error was raised where the queue ran). Compute it again."
        )
    return allocation.buffer


def device_index(device: torch.device | str | int | None) -> int | None:
    if device is None or isinstance(device, int):
        return device
    return torch.device(device).index


def check_index(index: int | None) -> None:
    if index is not None and not 0 <= index < device_count():
        raise DeviceError(
            f"nkipy:{index} does not exist: this process sees {device_count()} nkipy device(s) "
            f"(nkipy:0 .. nkipy:{device_count() - 1}). Each process drives one device; pick the "
            "core per process with NEURON_RT_VISIBLE_CORES or torchrun, then use 'nkipy'."
        )


def device_count() -> int:
    return getattr(runtime(), "device_count", 1)


#: the dispatcher's handle of ``set_``: redispatching through it skips ``OpOverload.redispatch``
_SET = _torch.dispatcher_handle(torch.ops.aten.set_.source_Storage_storage_offset)


def set_layout(
    t: torch.Tensor,
    storage: torch.UntypedStorage,
    shape: Sequence[int],
    strides: Sequence[int],
    offset: int = 0,
) -> None:
    """Point ``t`` at ``storage`` with this layout; torch's CPU ``set_`` kernel only writes
    metadata (and checks the layout fits the storage)."""
    _SET.redispatch_boxed(_CPU, t, storage, offset, shape, strides)


def _span(shape: Sequence[int], strides: Sequence[int], offset: int, itemsize: int) -> int:
    """Bytes a layout reaches into its storage (torch's computeStorageNbytes)."""
    if 0 in shape:
        return 0
    end = offset + 1
    for size, stride in zip(shape, strides):
        end += (size - 1) * stride
    return end * itemsize


def _tensor(
    buffer, nbytes: int, dtype: torch.dtype, shape, strides, offset: int = 0
) -> torch.Tensor:
    t = _torch.create_empty_tensor((0,), dtype)
    _SET.redispatch_boxed(
        _CPU, t, _storage(buffer, nbytes), offset, shape, strides
    )  # set_layout, inline
    return t


def empty(
    shape: Sequence[int], dtype: torch.dtype, strides: Sequence[int] | None = None
) -> torch.Tensor:
    """A new device tensor with its own buffer (contents undefined)."""
    if dtype not in _DTYPES:
        held = [*(str(d.torch) for d in DType), *map(str, _COMPLEX)]
        raise DeviceError(
            f"nkipy tensors cannot hold {dtype}; the device has {', '.join(held)}. "
            "Keep this tensor on CPU."
        )
    strides = contiguous_strides(shape) if strides is None else strides
    nbytes = _span(shape, strides, 0, dtype.itemsize)
    return _tensor(runtime().allocate(nbytes), nbytes, dtype, shape, strides)


def resize(t: torch.Tensor, shape: Sequence[int]) -> None:
    """``resize_``: a contiguous layout; a bigger size grows the storage in place, keeping its
    bytes, so every view of it sees the new buffer (as on CPU)."""
    storage, strides = t.untyped_storage(), contiguous_strides(shape)
    offset = int(t.storage_offset())
    needed = _span(shape, strides, offset, t.element_size())
    if needed > storage.nbytes():
        resize_storage(storage, needed)
    set_layout(t, storage, shape, strides, offset)


def resize_storage(storage: torch.UntypedStorage, nbytes: int) -> None:
    """Give a device storage ``nbytes`` bytes in place, keeping the first bytes up to the
    smaller size, as torch's ``UntypedStorage.resize_`` does: every tensor on the storage sees
    the new memory, and 0 frees it (the memory statistics count both).

    Torch resizes a PrivateUse1 storage through its backend hooks (``resizePrivateUse1Bytes``),
    which a device registered from Python cannot give. So the storage swaps its memory (data
    pointer and size: ``_torch.swap_storage_memory``, which torch allows when one side is empty)
    first with an empty storage, then with a new storage over the new buffer; the old buffer is
    freed with the allocation the storage drops."""
    if nbytes < 0:
        raise DeviceError(
            f"a storage cannot be resized to {nbytes} bytes; give a size of 0 or more"
        )
    old = storage.nbytes()
    if nbytes == old:
        return
    allocation = getattr(storage, _ATTR, None)
    if _watcher is not None and allocation is not None:
        _watcher(allocation)  # queued ops that use the storage run first, on its old memory
    adopt(storage)
    fresh = _storage(runtime().allocate(nbytes), nbytes) if nbytes else None
    kept = min(old, nbytes)
    if fresh is not None and kept:
        runtime().copy(_bytes(_buffer(storage), kept), _bytes(_buffer(fresh), kept))
    if old:
        _torch.swap_storage_memory(storage, _torch.storage_from_data_pointer(0, storage.device, 0))
        storage.__dict__.pop(_ATTR, None)  # frees the old buffer, if this storage owned it
    if fresh is not None:
        _torch.swap_storage_memory(storage, fresh)
        setattr(storage, _ATTR, fresh.__dict__.pop(_ATTR))


def clone_storage(storage: torch.UntypedStorage) -> DeviceStorage:
    """A new storage with a copy of ``storage``'s bytes, copied on the device."""
    nbytes = storage.nbytes()
    buffer = runtime().allocate(nbytes)
    if nbytes:
        runtime().copy(_bytes(_buffer(storage), nbytes), _bytes(buffer, nbytes))
    return _storage(buffer, nbytes)


def _bytes(buffer, nbytes: int) -> DeviceArray:
    return DeviceArray(buffer, DType.u8, (nbytes,), (1,))


def array(t: torch.Tensor) -> DeviceArray:
    """The runtime's view of a device tensor (every input of every kernel call on the device
    asks: the storage's own buffer is looked up inline, the rare others by ``_buffer``). The
    storage keeps the last one it gave, handed out again while the tensor's layout matches."""
    allocation = getattr(t.untyped_storage(), _ATTR, None)
    if allocation is None:
        return _array(_buffer(t.untyped_storage()), t)
    if _watcher is not None:
        _watcher(allocation)
    last = allocation.array
    if (
        last is not None
        and last.shape == t.shape
        and last.strides == t.stride()
        and last.offset == t.storage_offset()
        and last.dtype.torch is t.dtype
    ):
        return last
    allocation.array = made = _array(_held(allocation), t)
    return made


def _array(buffer, t: torch.Tensor) -> DeviceArray:
    if t.dtype not in _DTYPES:  # a view of the bytes as another type (``view_as_complex`` of f16)
        raise DeviceError(
            f"nkipy tensors cannot hold {t.dtype}, so no kernel reads or writes one; move it with "
            ".cpu() first"
        )
    dtype = _DTYPES[t.dtype]
    if dtype is None:  # complex: its real view, parts interleaved, element offsets doubled
        return DeviceArray(
            buffer,
            value_type((), t.dtype).dtype,
            (*t.shape, 2),
            (*(2 * s for s in t.stride()), 1),
            2 * int(t.storage_offset()),
        )
    return DeviceArray(
        buffer,
        dtype,
        t.shape,
        t.stride(),
        int(t.storage_offset()),  # a device tensor's layout is concrete
    )


#: the complex dtypes the device holds, passed to runtimes as their real views
_COMPLEX = (torch.complex64, torch.complex128)
#: the DType of each torch dtype the device holds; ``None`` for a complex one
_DTYPES: dict[torch.dtype, DType | None] = {
    **{d.torch: d for d in DType},
    **dict.fromkeys(_COMPLEX),
}


def wrap(result: DeviceArray) -> torch.Tensor:
    """A device tensor owning a buffer the runtime just produced (e.g. a kernel output)."""
    dtype = result.dtype.torch
    nbytes = _span(result.shape, result.strides, result.offset, dtype.itemsize)
    return _tensor(result.buffer, nbytes, dtype, result.shape, result.strides, result.offset)


def from_host(host: torch.Tensor) -> torch.Tensor:
    """A new device tensor holding a CPU tensor's values (one host-to-device transfer)."""
    t = empty(host.shape, host.dtype)
    write(t, host)
    return t


def write(t: torch.Tensor, host: torch.Tensor) -> None:
    """Copy a CPU tensor of ``t``'s shape and dtype into device tensor ``t`` (stored as ``t``'s
    conjugate and negative bits say, so that ``t`` reads the values of ``host``)."""
    if t.is_conj():
        host = host.conj()
    if t.is_neg():
        host = host.neg()
    runtime().to_device(torch_to_numpy(host.resolve_conj().resolve_neg()), array(t))


def to_host(t: torch.Tensor) -> torch.Tensor:
    """A new CPU tensor holding a device tensor's values (one device-to-host transfer), its
    conjugate and negative bits applied."""
    host = numpy_to_torch(runtime().to_host(array(t)))
    if t.is_complex():
        host = torch.view_as_complex(host)
    host = host.reshape(t.shape)
    if t.is_conj():
        host = host.conj_physical()
    if t.is_neg():
        host = host.neg()
    return host


def raw(t: torch.Tensor) -> torch.Tensor:
    """A view of ``t``'s storage and layout without its conjugate and negative bits: the values
    as the buffer holds them (``t`` itself when it has neither)."""
    if not (t.is_conj() or t.is_neg()):
        return t
    alias = _torch.create_empty_tensor((0,), t.dtype)
    set_layout(alias, t.untyped_storage(), t.shape, t.stride(), int(t.storage_offset()))
    return alias


def read_into(t: torch.Tensor, host: torch.Tensor) -> None:
    """Copy device tensor ``t`` into CPU tensor ``host`` of its shape (one device-to-host
    transfer): straight into ``host``'s memory where the runtime can (``to_host_into``) and the
    copy needs no conversion, else through a new host array (``to_host``) and ``copy_``."""
    into = getattr(runtime(), "to_host_into", None)
    plain = not (t.is_complex() or t.is_conj() or t.is_neg() or host.is_conj() or host.is_neg())
    if into is None or host.dtype != t.dtype or not plain:
        host.copy_(to_host(t))
        return
    into(array(t), torch_to_numpy(host))
