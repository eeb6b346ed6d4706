"""Keep dynamo out of the methods torch calls from C++.

DDP's reducer calls the group's ``broadcast`` and its works' ``wait``/``get_future`` from C++
while a compiled module's forward runs; dynamo's frame hook is live there, so it would try to
compile those Python frames (and fail on the group, an opaque object to it). torch's own Python
groups escape this by living in ``torch.distributed``, whose files dynamo skips; ours say so
with ``torch.compiler.disable`` (about 0.7 µs a call).
"""

from __future__ import annotations

import inspect
from typing import TypeVar

import torch

T = TypeVar("T", bound=type)


def untraced(cls: T) -> T:
    """``cls`` with every method it defines (not dunders) run outside dynamo."""
    for name, fn in list(vars(cls).items()):
        if inspect.isfunction(fn) and not name.startswith("__"):
            setattr(cls, name, torch.compiler.disable(fn, recursive=True))
    return cls
