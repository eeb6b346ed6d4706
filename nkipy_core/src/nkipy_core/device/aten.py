"""The ATen kernels of the ``nkipy`` device (dispatch key PrivateUse1), registered from Python.

A few ops are the device's own business and are implemented here: allocation (``empty``,
``empty_strided``, ``resize_``, inductor's ``resize_storage_bytes_``), copies across and within
the device (``_copy_from``, which torch's ``copy_`` and ``.to()`` reach), reading one value
(``item``) and ``record_stream``. Everything else goes
through one boxed fallback (this module imports only torch at load time, so registering it
inside ``import torch`` stays cheap; ``memory`` is imported on first use):

* view ops and ``set_`` only compute sizes/strides over a storage, so torch's own CPU kernels
  are redispatched to; they never read data and produce ``nkipy`` views of the same buffer;
* ``_foreach_*`` ops go to torch's CPU reference kernels too, which loop over per-tensor ATen
  calls that come back to this device one by one (optimizers pick the foreach path here);
* every other op runs eagerly through the op packs (``eager.run``, which the device hands this
  module at its first use: ``eager`` sits above it and claims ops here).

The CUDA-only fused RNN cells that torch calls for PrivateUse1 devices get compositions of ATen
ops (``rnn``).

Torch's conjugate and negative bits (``x.conj()``, ``x.conj().imag``) are views: the buffer keeps
the stored values. Torch's fallbacks for those bits resolve them before most ops, but pass a few
through unresolved (``clone``, the matmuls, ``repeat_interleave``: ``_READS_MATH_BITS``), which
CPU and CUDA kernels handle themselves; here their kernels get the values resolved
(``_resolving``), and ``_copy_from`` stores or reads through the bits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from nkipy_core import _torch
from nkipy_core.compiler.aten_schema import functional_form, is_view
from nkipy_core.device import overlap, rnn
from nkipy_core.errors import DeviceError

_CPU = _torch.DispatchKeySet(_torch.DispatchKey.CPU)
_library: tuple[torch.library.Library, ...] | None = None
_redispatch: dict[_torch.OpOverload, bool] = {}


def _first_use_then_run(op: _torch.OpOverload, args: tuple, kwargs: dict):
    """An op on the device before its first use (a factory with no tensor argument): using the
    device's memory runs its first-use work, which hands this module ``eager.run``."""
    from nkipy_core.buffers import memory

    memory.runtime()
    return _run_eagerly(op, args, kwargs)


#: how an op no CPU kernel serves runs on the device: ``eager.run`` from its first use on
_run_eagerly = _first_use_then_run


def run_eagerly_with(run) -> None:
    """Run the device's ops with ``run(op, args, kwargs)`` (``eager.run``): the device's
    first-use work calls this, as this module, registered inside ``import torch``, cannot
    import the eager layer above it."""
    global _run_eagerly
    _run_eagerly = run


def _not_queued(src: torch.Tensor, dst: torch.Tensor) -> bool:
    return False


#: queues a copy between device tensors (the eager queue's ``write``), else says ``False``
_copy_queued: Callable[[torch.Tensor, torch.Tensor], bool] = _not_queued


def queue_copies_with(write: Callable[[torch.Tensor, torch.Tensor], bool]) -> None:
    """Give ``copy_`` between device tensors to the eager queue, which sits above this module:
    ``write(src, dst)`` queues it or returns ``False``. The device's first-use work calls this."""
    global _copy_queued
    _copy_queued = write


def _kernel_code(fn):
    """Mark a kernel as the device's code, not the user's: dynamo, when it runs around a graph
    break, must neither trace it nor anything it calls (the dispatcher calls it from C++)."""
    return _torch.untraced(fn)


def install() -> None:
    global _library
    if _library is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    kernel: Callable[..., Any]
    for name, kernel in (
        ("empty.memory_format", _empty),
        ("empty_strided", _empty_strided),
        ("resize_", _resize),
        ("copy_", _copy),
        ("_copy_from", _copy_from),
        ("_copy_from_and_resize", _copy_from_and_resize),
        ("_local_scalar_dense", _item),
        ("record_stream", _record_stream),
        ("_to_copy", _to_copy),
    ):
        lib.impl(name, _kernel_code(kernel), "PrivateUse1")
    for name in ("set_.source_Storage", "set_.source_Storage_storage_offset"):
        lib.impl(
            name, _kernel_code(_set_storage(getattr(torch.ops.aten.set_, name[5:]))), "PrivateUse1"
        )
    for name, kernel in rnn.KERNELS:
        lib.impl(name, _kernel_code(kernel), "PrivateUse1")
    fallback = torch.library.Library("_", "IMPL")  # torch takes fallbacks on the global namespace
    fallback.fallback(_kernel_code(_fallback), "PrivateUse1")
    # what compiled FSDP2 calls for ``storage.resize_`` (torch's own kernel asks C++ hooks)
    inductor = torch.library.Library("inductor", "IMPL")
    inductor.impl("resize_storage_bytes_", _kernel_code(_resize_storage_bytes), "PrivateUse1")
    _library = (lib, fallback, inductor)


#: move data between devices: torch's composite kernels (``empty`` + ``copy_``) do that right
_TRANSFERS = {"aten::_to_copy.default", "aten::copy.default"}
_claimed: set[_torch.OpOverload] = set()


def claim(ops) -> None:
    """Give the ops the packs lower, and their in-place and ``out=`` forms, a PrivateUse1 kernel
    of their own that goes straight to ``eager.run`` (views among them: to torch's CPU kernel).

    Two reasons. The dispatcher prefers an op's CompositeExplicitAutograd kernel to a backend
    fallback, so e.g. ``native_layer_norm`` would be decomposed before the pack that lowers it
    ever saw it; an explicit PrivateUse1 kernel wins over the composite one. And a per-op kernel
    is cheaper to reach than the boxed fallback (about 1 µs against 3–6 µs: the fallback makes
    torch find the ``OpOverload`` and box every argument), which is most of an eager op's
    dispatch. Composite*Implicit* ops are left alone: they decompose above autograd, which has
    no formula for them, and a backend kernel would take that decomposition away. Called
    whenever the plugins are (re)loaded for the device (its first allocation, a new
    configuration), never inside ``import torch``; 300 ops register in a few milliseconds.
    """
    from nkipy_core.plugin.registry import resolve_op

    named = {
        resolve_op(name) for name in ops if name.startswith("aten::") and name not in _TRANSFERS
    }
    views = {op for op in named if _redispatched(op)}
    lowered = named - views
    for op in sorted(lowered | views | _mutating_forms(lowered), key=str):
        if op in _claimed:
            continue
        _claimed.add(op)
        if not (
            op.has_kernel_for_dispatch_key(_torch.DispatchKey.CompositeImplicitAutograd)
            or op.has_kernel_for_dispatch_key(_torch.DispatchKey.PrivateUse1)
        ):
            assert _library is not None, "install() registers the device's library first"
            _library[0].impl(
                op,
                _kernel_code(_cpu_kernel(op) if op in views else _eager_kernel(op)),
                "PrivateUse1",
            )


def _mutating_forms(ops: set) -> set:
    """The in-place and ``out=`` overloads whose functional op is in ``ops`` (``add_.Tensor``,
    ``add.out`` for ``add.Tensor``)."""
    packets = {
        getattr(torch.ops.aten, _torch.schema(op).name.split("::")[1] + suffix, None)
        for op in ops
        for suffix in ("", "_")
    }
    candidates = (getattr(p, name) for p in packets if p is not None for name in p.overloads())
    return {op for op in candidates if _torch.schema(op).is_mutable and functional_form(op) in ops}


def _eager_kernel(op: _torch.OpOverload):
    if _reads_math_bits(op):
        return _resolving(op)

    def kernel(*args, **kwargs):
        return _run_eagerly(op, args, kwargs)

    return kernel


#: ops torch's conjugate and negative-bit fallbacks pass through with the bits set although
#: they read values (the rest of their pass-through lists are views, copies and factories)
_READS_MATH_BITS = frozenset(
    f"aten::{name}"
    for name in (
        "clone",
        "dot",
        "vdot",
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "linalg_solve_triangular",
        "repeat_interleave",
    )
)


def _reads_math_bits(op: _torch.OpOverload) -> bool:
    return _torch.schema(op).name in _READS_MATH_BITS


def _resolving(op: _torch.OpOverload):
    """The kernel of an op in ``_READS_MATH_BITS``: its inputs' bits applied first (a tensor it
    writes must have none)."""

    def kernel(*args, **kwargs):
        if not any(_has_math_bits(x) for x in (*args, *kwargs.values())):
            return _run_eagerly(op, args, kwargs)

        def resolve(x):
            return _values(x) if _has_math_bits(x) else x

        for i, a in enumerate(_torch.schema(op).arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                written = kwargs.get(a.name) if a.kwarg_only or i >= len(args) else args[i]
                if _has_math_bits(written):
                    raise DeviceError(
                        f"{_torch.schema(op).name} would write into a conjugate or negative view "
                        "on nkipy; write into a tensor without those bits (.resolve_conj(), "
                        ".resolve_neg()) and copy_ it into the view"
                    )
        return _run_eagerly(op, *_torch.tree_map(resolve, (args, kwargs)))

    return kernel


def _has_math_bits(x: Any) -> bool:
    """Whether ``x`` is a tensor with the conjugate or negative bit (tensor lists, which the
    ops in ``_READS_MATH_BITS`` do not take, are not looked into)."""
    return isinstance(x, torch.Tensor) and (x.is_conj() or x.is_neg())


def _with_bits(t: torch.Tensor, conj: bool, neg: bool) -> torch.Tensor:
    """``t`` (no bits set) conjugated and negated as asked, as new tensors."""
    if conj:
        t = torch.conj_physical(t)
    if neg:
        t = torch.neg(t)
    return t


def _values(t: torch.Tensor) -> torch.Tensor:
    """A device tensor without conjugate or negative bits holding ``t``'s values."""
    from nkipy_core.buffers import memory

    return _with_bits(memory.raw(t), t.is_conj(), t.is_neg())


def _cpu_kernel(op: _torch.OpOverload):
    """A view op's kernel: torch's CPU kernel, which only computes sizes and strides (what the
    fallback does for every other view, here without its per-call lookup of the op)."""
    handle = _torch.dispatcher_handle(op)

    def kernel(*args, **kwargs):
        return handle.redispatch_boxed(_CPU, *args, **kwargs)

    return kernel


def _set_storage(op: _torch.OpOverload):
    """``set_`` onto a storage: torch's CPU kernel (metadata only), once the storage is the
    device's own class (``memory.adopt``: a deepcopy's copy arrives as torch's)."""
    handle = _torch.dispatcher_handle(op)

    def kernel(self, source, *args, **kwargs):
        from nkipy_core.buffers import memory

        memory.adopt(source)
        return handle.redispatch_boxed(_CPU, self, source, *args, **kwargs)

    return kernel


def _empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    from nkipy_core.buffers import memory

    memory.check_index(memory.device_index(device))
    dtype = dtype or torch.get_default_dtype()
    if memory_format in (None, torch.contiguous_format, torch.preserve_format):
        return memory.empty(size, dtype)
    strides = torch.empty(size, dtype=dtype, device="meta", memory_format=memory_format).stride()
    return memory.empty(size, dtype, strides)


def _empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    from nkipy_core.buffers import memory

    memory.check_index(memory.device_index(device))
    return memory.empty(size, dtype or torch.get_default_dtype(), stride)


def _resize(self, size, *, memory_format=None):
    from nkipy_core.buffers import memory

    memory.resize(self, size)
    return self


def _resize_storage_bytes(variable: torch.Tensor, new_size: int) -> None:
    from nkipy_core.buffers import memory

    memory.resize_storage(variable.untyped_storage(), new_size)


def _to_copy(
    self: torch.Tensor,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    non_blocking=False,
    memory_format=None,
) -> torch.Tensor:
    """``.to(...)`` of a device tensor: a new tensor (``empty_like``) and ``copy_``, as torch's
    composite kernel does, except that a non-blocking copy to the host is not pinned. Torch pins
    it for PrivateUse1 (distributed checkpointing stages every tensor so), and a pinned-memory
    allocator can only be given to torch from C++; the device's copies are synchronous, so an
    ordinary host tensor is what the copy would end in anyway."""
    if layout not in (None, torch.strided) or pin_memory:
        raise DeviceError(
            f"nkipy tensors copy to strided, unpinned tensors only (asked: layout={layout}, "
            f"pin_memory={pin_memory}); copy to CPU first and convert there"
        )
    out = torch.empty_like(
        self,
        dtype=dtype or self.dtype,
        device=device or self.device,
        memory_format=memory_format or torch.preserve_format,
    )
    return out.copy_(self)


def _record_stream(self: torch.Tensor, stream: torch.Stream) -> None:
    """Nothing to record: a queued kernel holds the tensors it reads until it has run, so torch
    never frees a buffer under it (``device/streams.py``)."""


def _copy(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """``copy_`` with the device on either side. Torch's own (composite) kernel calls
    ``_copy_from``, and its conjugate and negative-bit fallbacks would hand that a resolved copy
    of a target with those bits (``x.conj().copy_(y)``), writing the copy instead of ``x``."""
    return _copy_from(src, self, non_blocking)


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """``dst.copy_(src)`` where at least one side is on the device: broadcast, cast, move. The
    values are ``src``'s as its bits say, stored as ``dst``'s bits say (``memory.to_host`` and
    ``memory.write`` do that for transfers)."""
    from nkipy_core.buffers import memory

    if src is not dst:
        overlap.check_write(dst, [src])
    if src.shape != dst.shape:
        src = src.expand(dst.shape)
    if not memory.is_nkipy(dst):
        memory.read_into(src, dst)
    elif not memory.is_nkipy(src):
        memory.write(dst, src.to(dst.dtype).contiguous())
    elif not _copy_queued(src, dst):
        if src.dtype != dst.dtype:
            src = _run_eagerly(
                torch.ops.aten._to_copy.default, (_values(src),), {"dtype": dst.dtype}
            )
        if (src.is_conj(), src.is_neg()) != (dst.is_conj(), dst.is_neg()):
            src = _with_bits(_values(src), dst.is_conj(), dst.is_neg())
        memory.runtime().copy(memory.array(src), memory.array(dst))
    return dst


def _copy_from_and_resize(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.shape != src.shape:
        dst.resize_(src.shape)
    return _copy_from(src, dst)


def _item(self: torch.Tensor):
    from nkipy_core.buffers import memory

    return memory.to_host(self).item()


def _redispatched(op: _torch.OpOverload) -> bool:
    """Ops whose CPU kernels only touch metadata or loop over other ATen calls."""
    answer = _redispatch.get(op)
    if answer is None:
        name = _torch.schema(op).name
        answer = is_view(op) or name == "aten::set_" or name.startswith("aten::_foreach_")
        _redispatch[op] = answer
    return answer


def _fallback(op: _torch.OpOverload, *args, **kwargs):
    if _redispatched(op):
        return op.redispatch(_CPU, *args, **kwargs)
    if _reads_math_bits(op):
        return _resolving(op)(*args, **kwargs)
    return _run_eagerly(op, args, kwargs)
