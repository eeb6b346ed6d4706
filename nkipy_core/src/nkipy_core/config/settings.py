"""Backend configuration: ``init_nkipy_backend``, per-compile options and runtime selection.

The configuration is process-wide (one cache, one device runtime per process, like a torch
device); ``torch.compile(..., options={...})`` overrides fields for one compiled function.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from nkipy_core.config import env
from nkipy_core.errors import ConfigurationError, RuntimeNotFoundError, RuntimeUnavailableError
from nkipy_core.plugin import manager as plugins
from nkipy_core.runtime.base import CompileOptions

log = logging.getLogger("nkipy")


def _detect_rank_world() -> tuple[int, int]:
    """torch.distributed if initialised, else the launcher's LOCAL_RANK/RANK/WORLD_SIZE."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    local_rank = env.LOCAL_RANK.get()
    return env.RANK.get() if local_rank is None else local_rank, env.WORLD_SIZE.get()


def _positive(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(
            f"{attribute.name} must be a positive integer, got {value!r}; pass a whole number "
            f"of at least 1 (the default is {attribute.default})"
        )


def _positive_or_none(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None:
        _positive(instance, attribute, value)


def _memory_limit(value: int | str | None) -> int | None:
    """A memory limit as bytes: an int, or a size in words (``"16GiB"``); ``None``: no limit."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    try:
        if isinstance(value, str):
            return env.parse_bytes(value)
    except ValueError:
        pass
    raise ConfigurationError(
        f"memory_limit must be a size in bytes of at least 1 (an int, or text such as '16GiB' "
        f"or '1.5GB'), or None for no limit; got {value!r}"
    )


@attrs.frozen
class Config:
    """The settings of the process (``init_nkipy_backend``); field defaults are the defaults of
    both ``init_nkipy_backend()`` and of a process that never calls it.

    ``log_level=None`` leaves the ``nkipy`` logger as the application configured it (WARNING
    unless told otherwise); ``runtime=None`` picks the best available runtime, which the ``nkipy``
    device presents to torch as an accelerator only if it is hardware (see ``torch.nkipy.is_available``).
    """

    nkipy_cache: Path = attrs.field(default=Path("./nkipy_cache"), converter=Path)
    log_level: int | None = None
    rank: int = 0
    world_size: int = 1
    additional_compiler_args: str = ""
    runtime: str | None = None
    strict: bool = False
    #: static kernel graphs compiled per graph with symbolic sizes (one per size set) before
    #: further sizes run as torch on CPU; see ``nkipy_core.dynamo.specialize``
    max_specializations: int = attrs.field(default=32, validator=_positive)
    #: the most kernel graphs one compiled function may need (its dynamo graphs, recompiles and
    #: specialisations together) before ``RecompileLimitError``: a recompile storm found in CI
    #: (``NKIPY_MAX_KERNELS``; ``None``: no limit); see ``nkipy_core.observe.recompiles``
    max_kernels: int | None = attrs.field(default=None, validator=_positive_or_none)
    #: random ops draw from torch's CPU generator on the host (bit-exact with eager) instead of
    #: the kernels' Philox stream (see ``nkipy_core.compiler.rng``)
    fallback_random: bool = False
    #: the hardware generation runtimes with targets compile for (``nrt``: trn1, trn2, trn3);
    #: ``None`` lets the runtime detect it from the machine (``NKIPY_TARGET`` overrides)
    target: str | None = None
    #: a runtime to compile every kernel for too, into the cache, while the program executes on
    #: ``runtime``: ahead-of-time compiles on a machine without the device (``NKIPY_PRECOMPILE``;
    #: ``nkipy-ops precompile`` sets it)
    precompile: str | None = None
    #: the most bytes the device's tensors and kernel results may hold at once; past it an
    #: allocation raises ``DeviceOutOfMemoryError`` (``NKIPY_MEMORY_LIMIT``; ``None``: no limit)
    memory_limit: int | None = attrs.field(default=None, converter=_memory_limit)
    #: eager ops on the device are queued and run as fused kernels where torch needs a value
    #: (``device/fusion.py``); off: one kernel per op (``NKIPY_EAGER_FUSION``)
    eager_fusion: bool = True
    #: a graph's repeated layers (a model's own module class, items of a container, running the
    #: same ops) become one kernel per distinct layer, called once per layer, instead of being
    #: fused with the rest; off: each supported region is one kernel, as on a runtime that
    #: compiles ``whole_graphs`` (``NKIPY_DEDUP_LAYERS``; see ``nkipy_core.compiler.blocks``)
    dedup_layers: bool = True

    def compile_options(self) -> CompileOptions:
        """What a runtime compiles and loads a kernel with under this configuration."""
        return CompileOptions(
            self.additional_compiler_args, self.rank, self.world_size, self.target
        )

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


_DEFAULTS = Config()
_lock = threading.Lock()
_config: Config | None = None
#: whether ``_config`` was set by ``init_nkipy_backend`` (then it stays) or by the defaults at the
#: first use of the backend or the device (then the first explicit call replaces it)
_explicit = False


def _resolve(
    rank: int | None = None,
    world_size: int | None = None,
    runtime: str | None = None,
    nkipy_cache: str | os.PathLike | None = None,
    target: str | None = None,
    precompile: str | None = None,
    memory_limit: int | str | None = None,
    max_kernels: int | None = None,
    **settings,
) -> Config:
    """A configuration from the given settings, the environment and the defaults: the one place
    that fills in rank, world size and the ``NKIPY_*`` variables (``RUNTIME``, ``CACHE``,
    ``TARGET``, ``PRECOMPILE``, ``MEMORY_LIMIT``), for explicit and implicit configs alike."""
    detected_rank, detected_world = _detect_rank_world()
    return Config(
        rank=detected_rank if rank is None else rank,
        world_size=detected_world if world_size is None else world_size,
        runtime=runtime or env.NKIPY_RUNTIME.get(),
        nkipy_cache=nkipy_cache or env.NKIPY_CACHE.get(),
        target=target or env.NKIPY_TARGET.get(),
        precompile=precompile or env.NKIPY_PRECOMPILE.get(),
        memory_limit=memory_limit or env.NKIPY_MEMORY_LIMIT.get(),
        max_kernels=env.NKIPY_MAX_KERNELS.get() if max_kernels is None else max_kernels,
        **{
            "eager_fusion": env.NKIPY_EAGER_FUSION.get(),
            "dedup_layers": env.NKIPY_DEDUP_LAYERS.get(),
            **settings,
        },
    )


def init_nkipy_backend(
    nkipy_cache: str | os.PathLike | None = None,
    log_level: int | None = _DEFAULTS.log_level,
    rank: int | None = None,
    world_size: int | None = None,
    additional_compiler_args: str = _DEFAULTS.additional_compiler_args,
    runtime: str | None = None,
    strict: bool = _DEFAULTS.strict,
    max_specializations: int = _DEFAULTS.max_specializations,
    fallback_random: bool = _DEFAULTS.fallback_random,
    target: str | None = None,
    precompile: str | None = None,
    memory_limit: int | str | None = None,
    eager_fusion: bool | None = None,
    max_kernels: int | None = None,
    dedup_layers: bool | None = None,
) -> Config:
    """Configure the nkipy backend for this process.

    ``rank``/``world_size`` default to torch.distributed's, then LOCAL_RANK/RANK/WORLD_SIZE.
    ``runtime=None`` picks the highest-priority available runtime (``NKIPY_RUNTIME`` overrides);
    naming a runtime, ``"cpu"`` included, also lets ``torch.accelerator`` pick the ``nkipy`` device.
    ``log_level=None`` leaves the ``nkipy`` logger as it is.
    ``max_specializations`` bounds the static kernel graphs compiled for one graph whose sizes
    change between calls (one per distinct size set); past it new sizes run as torch on CPU.
    ``fallback_random=True`` takes random tensors from torch's CPU generator on the host, as eager
    does (bit-exact under the same seed), instead of generating them in the kernels.
    ``nkipy_cache=None`` is ``NKIPY_CACHE``, else ``./nkipy_cache``. ``target`` is the hardware
    generation to compile for (``NKIPY_TARGET``; default: detected by the runtime).
    ``precompile`` names a runtime to compile every kernel for as well, into the cache, while
    the program runs on ``runtime`` (``NKIPY_PRECOMPILE``; see ``nkipy-ops precompile``).
    ``memory_limit`` (bytes, or text such as ``"16GiB"``; ``NKIPY_MEMORY_LIMIT``) caps the device
    memory the process's ``nkipy`` tensors and kernel results hold at once: an allocation past it
    raises ``DeviceOutOfMemoryError``, a ``torch.OutOfMemoryError`` (see docs/device.md).
    ``eager_fusion`` (``NKIPY_EAGER_FUSION``, default on) queues eager ops on the device and runs
    them as fused kernels where a value is needed; off runs one kernel per op (see docs/device.md).
    ``max_kernels`` (``NKIPY_MAX_KERNELS``; default: no limit) makes a compiled function that needs
    more kernel graphs than that raise ``RecompileLimitError`` (see docs/shapes.md).
    ``dedup_layers`` (``NKIPY_DEDUP_LAYERS``, default on) compiles a model's repeated layers as
    one kernel per distinct layer, called once per layer; off fuses them with the rest, as the
    ``inductor`` runtime always does (see docs/architecture.md).

    Before any call, the first use of the backend or the device (a compile, ``.to("nkipy")``)
    configures the process with these same defaults, and the first call replaces that implicit
    configuration; questions such as ``torch.accelerator.is_available()`` configure nothing.
    Calling it again with the same settings is a no-op; with different settings it is a
    ``ConfigurationError``, because compiled functions already hold the first settings.
    """
    global _config, _explicit
    config = _resolve(
        rank,
        world_size,
        runtime,
        nkipy_cache=nkipy_cache,
        target=target,
        precompile=precompile,
        memory_limit=memory_limit,
        max_kernels=max_kernels,
        log_level=log_level,
        additional_compiler_args=additional_compiler_args,
        strict=strict,
        max_specializations=max_specializations,
        fallback_random=fallback_random,
        **({} if eager_fusion is None else {"eager_fusion": eager_fusion}),
        **({} if dedup_layers is None else {"dedup_layers": dedup_layers}),
    )
    with _lock:
        if _explicit and _config != config:
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
        if _config != config:
            _apply(config)
        _config, _explicit = config, True
        return config


def _apply(config: Config) -> None:
    if config.log_level is not None:
        logger = logging.getLogger("nkipy")
        logger.setLevel(config.log_level)
        if not logger.handlers and not logging.getLogger().handlers:
            # the user asked for a level, so show it even if the application configured no logging
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
            logger.addHandler(handler)
    loaded = plugins.get(strict=config.strict)
    runtime = select_runtime(config)  # fail now, not at the first compile, if the runtime is wrong
    for check in _checks:
        check(config, runtime)
    loaded.manager.hook.nkipy_configure(config=config)


#: what must hold before a configuration is applied, registered by the layers above this one
#: (which this layer does not import): each is called with the configuration and its runtime
_checks: list[Callable[[Config, Any], None]] = []


def on_apply(check: Callable[[Config, Any], None]) -> None:
    """Call ``check(config, runtime)`` before each configuration is applied; it raises
    ``ConfigurationError`` to refuse it. Registering the same function again does nothing."""
    if check not in _checks:
        _checks.append(check)


def current() -> Config:
    """The process configuration; if never initialised, the defaults (which a later
    ``init_nkipy_backend`` call replaces). Every eager op asks, so the common case (set)
    reads the global without the lock; only the first use takes it."""
    global _config
    config = _config
    if config is not None:
        return config
    with _lock:
        if _config is None:
            config = _resolve()
            _apply(config)
            _config = config
        return _config


def peek() -> Config:
    """The configuration in force, or else the one the first use would take, without taking it:
    answering a question (``torch.nkipy.is_available()``) configures nothing."""
    with _lock:
        return _config if _config is not None else _resolve()


def reset() -> None:
    """Forget the configuration (tests, notebooks); compiled functions keep theirs."""
    global _config, _explicit
    with _lock:
        _config, _explicit = None, False


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
        if runtime is not None and runtime.available()[0]:
            return runtime
    raise RuntimeUnavailableError(
        "no nkipy runtime is available; `nkipy-ops doctor` says what each one is missing"
    )
