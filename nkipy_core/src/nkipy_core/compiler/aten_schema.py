"""Questions about an ATen op that its schema answers.

Both the compiler (which ops of a CPU region move no data) and the device (which ops only
compute metadata over a storage, which functional op an in-place or ``out=`` op computes) ask
them. It imports only torch: the device's kernels are registered inside ``import torch``.
"""

from __future__ import annotations

import torch

from nkipy_core import _torch


def is_view(op: _torch.OpOverload) -> bool:
    """Whether ``op`` returns a view of an input (it computes sizes and strides, no values)."""
    schema = _torch.schema(op)
    return not schema.is_mutable and any(
        r.alias_info is not None and not r.alias_info.is_write for r in schema.returns
    )


_functionals: dict[_torch.OpOverload, _torch.OpOverload | None] = {}


def functional_form(op: _torch.OpOverload) -> _torch.OpOverload | None:
    """The functional op a mutating op computes (``add_.Tensor`` -> ``add.Tensor``, ``add.out``
    -> ``add.Tensor``, ``normal_`` -> ``normal_functional``), or ``None``."""
    if op in _functionals:
        return _functionals[op]
    schema = _torch.schema(op)
    base = schema.name.split("::")[1]
    written = {
        a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write
    }
    if base.endswith("_") and written == {"self"}:
        # ``normal_``'s functional form is ``normal_functional`` (``aten.normal`` takes tensors)
        packet = getattr(torch.ops.aten, base[:-1] + "_functional", None) or getattr(
            torch.ops.aten, base[:-1], None
        )
        wanted = schema.arguments
    elif written and all(a.kwarg_only for a in schema.arguments if a.name in written):
        packet = getattr(torch.ops.aten, base, None)
        wanted = [a for a in schema.arguments if a.name not in written]
    else:
        packet, wanted = None, []
    found = None
    for name in packet.overloads() if packet is not None else ():
        candidate = getattr(packet, name)
        if not _torch.schema(candidate).is_mutable and _same_arguments(
            _torch.schema(candidate).arguments, wanted
        ):
            found = candidate
            break
    _functionals[op] = found
    return found


#: what a functional factory takes beyond its ``out=`` form; given from the ``out`` tensor
_FACTORY = ("dtype", "layout", "device", "pin_memory")


def _same_arguments(candidate: list, wanted: list) -> bool:
    """Same arguments, allowing a functional factory's trailing keyword-only options."""
    head = [(x.name, x.type) for x in candidate[: len(wanted)]]
    extra = [x.name for x in candidate[len(wanted) :]]
    return head == [(x.name, x.type) for x in wanted] and all(n in _FACTORY for n in extra)
