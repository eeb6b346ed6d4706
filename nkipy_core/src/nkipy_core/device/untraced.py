"""Keep dynamo out of the device's Python code, as it keeps out of ``torch.cuda``'s.

Programs that dynamo compiles call the device module through torch (``torch.random.fork_rng``,
``torch.testing._utils.freeze_rng_state``, ``torch.accelerator``), and torch calls the device's
hooks and ATen kernels from C++ while dynamo runs. Dynamo inlines any function outside torch's
own files, and tracing ours under fake tensors fails (``set_rng_state`` under ``no_dispatch()``)
or runs runtime code at trace time. So each of these functions is marked
(``nkipy_core._torch.untraced``): a compiled function that calls one breaks the graph and calls
it as is, exactly as it calls ``torch.cuda.get_rng_state``.

The marks are on the device's own functions, made while it registers: dynamo need not be
imported for them (that would slow down every ``import torch``), and nothing of torch or of
other programs' code changes.
"""

from __future__ import annotations

import inspect
from types import ModuleType

from nkipy_core import _torch


def skip_in_dynamo(*owners: ModuleType | type) -> None:
    """Mark the functions defined in each module (or class) of ``owners`` as untraced."""
    for owner in owners:
        name = owner.__name__ if isinstance(owner, ModuleType) else owner.__module__
        for value in vars(owner).values():
            if inspect.isfunction(value) and value.__module__ == name:
                _torch.untraced(value)
