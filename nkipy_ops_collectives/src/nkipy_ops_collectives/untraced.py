"""Keep dynamo out of the methods torch calls from C++.

DDP's reducer calls the group's ``broadcast`` and its works' ``wait``/``get_future`` from C++
while a compiled module's forward runs; dynamo's frame hook is live there, so it would try to
compile those Python frames (and fail on the group, an opaque object to it). torch's own Python
groups escape this by living in ``torch.distributed``, whose files dynamo skips; ours carry the
core's mark (``nkipy_core._torch.untraced``: dynamo skips the frame and all it calls, at no cost
per call).
"""

from __future__ import annotations

import inspect
from typing import TypeVar

from nkipy_core import _torch

T = TypeVar("T", bound=type)


def untraced(cls: T) -> T:
    """``cls``, with every method it defines (not dunders) marked as untraced."""
    for name, fn in vars(cls).items():
        if inspect.isfunction(fn) and not name.startswith("__"):
            _torch.untraced(fn)
    return cls
