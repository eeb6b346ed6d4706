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
    """Mark the functions defined in each module (or class) of ``owners`` as untraced. For a
    module, also those it takes from nkipy's other modules, functions and classes alike:
    ``torch.nkipy`` gathers each concern's from its own module (``streams``, ``random``...)."""
    for owner in owners:
        module = isinstance(owner, ModuleType)
        name = owner.__name__ if module else owner.__module__
        for value in vars(owner).values():
            function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            where = getattr(function, "__module__", None) or ""
            ours = where.startswith("nkipy_core.") if module else where == name
            if not ours:
                continue
            if inspect.isfunction(function):
                _torch.untraced(function)
            elif module and inspect.isclass(value):
                skip_in_dynamo(value)
