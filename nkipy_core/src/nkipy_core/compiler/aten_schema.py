"""Questions about an ATen op that its schema answers.

Both the compiler (which ops of a CPU region move no data) and the device's ATen kernels (which
ops only compute metadata over a storage) ask them. It imports only torch: the device's kernels
are registered inside ``import torch``.
"""

from __future__ import annotations

from nkipy_core import _torch


def is_view(op: _torch.OpOverload) -> bool:
    """Whether ``op`` returns a view of an input (it computes sizes and strides, no values)."""
    schema = _torch.schema(op)
    return not schema.is_mutable and any(
        r.alias_info is not None and not r.alias_info.is_write for r in schema.returns
    )
