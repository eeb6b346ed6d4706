"""Backend configuration: ``init_nkipy_backend``, per-compile options and runtime selection.

The configuration is process-wide (one cache, one device runtime per process, like a torch
device); ``torch.compile(..., options={...})`` overrides fields for one compiled function.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import attrs

from . import plugins
from .errors import ConfigurationError, RuntimeNotFoundError, RuntimeUnavailableError

log = logging.getLogger("nkipy")


def _detect_rank_world() -> tuple[int, int]:
    """torch.distributed if initialised, else the launcher's LOCAL_RANK/RANK/WORLD_SIZE."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    rank = os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0"))
    return int(rank), int(os.environ.get("WORLD_SIZE", "1"))


def _positive(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(
            f"{attribute.name} must be a positive integer, got {value!r}; pass a whole number "
            f"of at least 1 (the default is {attribute.default})"
        )


@attrs.frozen
class Config:
    nkipy_cache: Path = attrs.field(default=Path("./nkipy_cache"), converter=Path)
    log_level: int = logging.WARNING
    rank: int = 0
    world_size: int = 1
    additional_compiler_args: str = ""
    runtime: str | None = None
    strict: bool = False
    #: static kernel graphs compiled per graph with symbolic sizes (one per size set) before
    #: further sizes run as torch on CPU; see ``nkipy_core.specialize``
    max_specializations: int = attrs.field(default=32, validator=_positive)
    #: random ops draw from torch's CPU generator on the host (bit-exact with eager) instead of
    #: the kernels' Philox stream (see ``nkipy_core.rng``)
    fallback_random: bool = False

    def override(self, options: dict[str, Any] | None) -> Config:
        """This config with ``torch.compile`` options applied; unknown keys are an error."""
        if not options:
            return self
        known = {f.name for f in attrs.fields(Config)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigurationError(
                f"unknown nkipy option(s) {unknown}; valid options are {sorted(known)}"
            )
        return attrs.evolve(self, **options)


_lock = threading.Lock()
_config: Config | None = None


def init_nkipy_backend(
    nkipy_cache: str | os.PathLike = "./nkipy_cache",
    log_level: int = logging.INFO,
    rank: int | None = None,
    world_size: int | None = None,
    additional_compiler_args: str = "",
    runtime: str | None = None,
    strict: bool = False,
    max_specializations: int = 32,
    fallback_random: bool = False,
) -> Config:
    """Configure the nkipy backend for this process.

    ``rank``/``world_size`` default to torch.distributed's, then LOCAL_RANK/RANK/WORLD_SIZE.
    ``runtime=None`` picks the highest-priority available runtime (``NKIPY_RUNTIME`` overrides).
    ``max_specializations`` bounds the static kernel graphs compiled for one graph whose sizes
    change between calls (one per distinct size set); past it new sizes run as torch on CPU.
    ``fallback_random=True`` takes random tensors from torch's CPU generator on the host, as eager
    does (bit-exact under the same seed), instead of generating them in the kernels.
    Calling it again with the same settings is a no-op; with different settings it is a
    ``ConfigurationError``, because compiled functions already hold the first settings.
    """
    global _config
    detected_rank, detected_world = _detect_rank_world()
    config = Config(
        nkipy_cache=Path(nkipy_cache),
        log_level=log_level,
        rank=detected_rank if rank is None else rank,
        world_size=detected_world if world_size is None else world_size,
        additional_compiler_args=additional_compiler_args,
        runtime=runtime or os.environ.get("NKIPY_RUNTIME") or None,
        strict=strict,
        max_specializations=max_specializations,
        fallback_random=fallback_random,
    )
    with _lock:
        if _config is not None and _config != config:
            changed = [
                f"{f.name}: {getattr(_config, f.name)!r} -> {getattr(config, f.name)!r}"
                for f in attrs.fields(Config)
                if getattr(_config, f.name) != getattr(config, f.name)
            ]
            raise ConfigurationError(
                "init_nkipy_backend was already called with different settings ("
                + "; ".join(changed)
                + "). Call it once per process, or pass per-function settings with "
                "torch.compile(..., options={...})."
            )
        if _config is None:
            _apply(config, strict)
        _config = config
        return config


def _apply(config: Config, strict: bool) -> None:
    logger = logging.getLogger("nkipy")
    logger.setLevel(config.log_level)
    if not logger.handlers and not logging.getLogger().handlers:
        # the user asked for a level, so show it even if the application configured no logging
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        logger.addHandler(handler)
    loaded = plugins.get(strict=strict)
    select_runtime(config)  # fail now, not at the first compile, if the runtime is wrong
    loaded.manager.hook.nkipy_configure(config=config)


def current() -> Config:
    """The process configuration; if never initialised, the defaults (logging left as it is)."""
    global _config
    with _lock:
        if _config is None:
            rank, world = _detect_rank_world()
            config = Config(
                log_level=logging.getLogger("nkipy").getEffectiveLevel(),
                rank=rank,
                world_size=world,
                runtime=os.environ.get("NKIPY_RUNTIME") or None,
            )
            _apply(config, strict=False)
            _config = config
        return _config


def reset() -> None:
    """Forget the configuration (tests, notebooks); compiled functions keep theirs."""
    global _config
    with _lock:
        _config = None


def select_runtime(config: Config):
    """The runtime ``config`` names, or the best available one; a clear error otherwise."""
    registry = plugins.get(strict=config.strict).runtimes
    if config.runtime is not None:
        runtime = registry.get(config.runtime)
        if runtime is None:
            raise RuntimeNotFoundError(
                f"no runtime named {config.runtime!r} is installed; installed runtimes: "
                f"{registry.names()}. Install the pack that provides it (nkipy-runtime gives "
                "'nrt' and 'xla') or pick one of those."
            )
        ok, reason = runtime.available()
        if not ok:
            raise RuntimeUnavailableError(
                f"runtime {config.runtime!r} is not available on this machine: {reason}"
            )
        return runtime
    for name in registry.names():
        runtime = registry.get(name)
        if runtime.available()[0]:
            return runtime
    raise RuntimeUnavailableError(
        "no nkipy runtime is available; `nkipy-ops doctor` says what each one is missing"
    )
