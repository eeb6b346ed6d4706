"""Registers the ``nkipy`` torch.distributed backend with torch, cheaply.

Torch finds out-of-tree process groups only in ``Backend.register_backend``; a program that
calls ``init_process_group("nkipy")`` after nothing but ``import torch`` must therefore find it
registered already. This module is that registration, reached from two places:

- the ``torch.backends`` entry point of this distribution, which torch calls inside every
  ``import torch`` (the same autoload that registers the ``nkipy`` device);
- the pack's plugin module, for processes started with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``
  (loading nkipy's plugins, or ``import nkipy_ops_collectives.plugin``, registers it then).

Running inside ``import torch`` means: import nothing heavy and never raise (torch turns an
exception into a failed ``import torch``). The process group itself is imported when a group is
created.
"""

from __future__ import annotations

import logging

from . import NAME


def register() -> None:
    """Register (again: idempotent) the ``nkipy`` backend for the ``nkipy`` device."""
    try:
        import torch.distributed as dist

        if dist.is_available():
            dist.Backend.register_backend(NAME, _create, extended_api=True, devices=[NAME])
    except Exception as exc:  # noqa: BLE001 - raising here would break `import torch` itself
        logging.getLogger("nkipy").warning(
            "the nkipy process group was not registered (%s: %s); "
            "`import nkipy_ops_collectives.process_group` shows the full error",
            type(exc).__name__,
            exc,
        )


def _create(options, backend_options):
    """Torch's extended creator contract: ``(DistributedBackendOptions, backend options)``."""
    from .process_group import NkipyProcessGroup

    return NkipyProcessGroup(options.store, options.group_rank, options.group_size, options.timeout)
