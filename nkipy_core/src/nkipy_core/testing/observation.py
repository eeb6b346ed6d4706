"""Watching what the backend does while a conformance sample runs: which lowered ops reached a
kernel, with torch's noisy logs quiet and a private kernel cache."""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from nkipy_core import _torch
from nkipy_core.plugin import manager as plugins
from nkipy_core.plugin.hookspecs import hookimpl
from nkipy_core.plugin.registry import op_name


class _Observer:
    """A graph pass that records the ATen overloads of every graph the backend compiles."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    @hookimpl(trylast=True)
    def nkipy_graph_passes(self, stage: str):
        return [self._record] if stage == "aten" else None

    def _record(self, gm: torch.fx.GraphModule) -> None:
        for node in gm.graph.nodes:
            if node.op == "call_function" and isinstance(node.target, _torch.OpOverload):
                self.seen.add(op_name(node.target))


@contextlib.contextmanager
def observing() -> Iterator[_Observer]:
    observer = _Observer()
    manager = plugins.get().manager
    name = f"nkipy-conformance-observer-{id(observer)}"
    manager.register(observer, name=name)
    try:
        yield observer
    finally:
        if manager.get_plugin(name) is not None:
            manager.unregister(name=name)


def _call(op: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return op(*args, **kwargs)


@contextlib.contextmanager
def traceable_opinfo_wrappers() -> Iterator[None]:
    """Random ops' OpInfos call ``wrapper_set_seed``, which dynamo cannot trace (it saves and
    reseeds the RNG); their values are only compared on deterministic samples, so call the op
    directly."""
    cmi = _torch.common_methods_invocations
    saved = cmi.wrapper_set_seed
    cmi.wrapper_set_seed = _call
    try:
        yield
    finally:
        cmi.wrapper_set_seed = saved


#: loggers whose warnings (graph breaks, recompiles) are noise in a conformance run
_NOISY_LOGGERS = ("torch._dynamo", "torch._functorch", "torch.fx.experimental.symbolic_shapes")


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


@contextlib.contextmanager
def kernel_cache(cache_dir: str | Path | None) -> Iterator[Path]:
    if cache_dir is not None:
        yield Path(cache_dir)
        return
    with tempfile.TemporaryDirectory(prefix="nkipy-conformance-") as tmp:
        yield Path(tmp)
