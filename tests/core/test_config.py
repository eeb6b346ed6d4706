"""init_nkipy_backend, options and runtime selection: each mistake is a clear, typed error."""

import types

import pytest
import torch
from torch._dynamo.exc import BackendCompilerFailed

from nkipy_core import (
    ConfigurationError,
    RuntimeNotFoundError,
    RuntimeUnavailableError,
    hookimpl,
    init_nkipy_backend,
)
from nkipy_core.config import settings as config


def test_defaults_without_init(plugin_env):
    x = torch.randn(3)
    torch.testing.assert_close(torch.compile(lambda a: a * 2, backend="nkipy")(x), x * 2)
    assert config.current().runtime is None
    assert config.current().nkipy_cache.name == "nkipy_cache"


def test_init_twice_same_settings_is_fine_different_is_an_error(plugin_env):
    init_nkipy_backend(nkipy_cache="c1", runtime="cpu")
    init_nkipy_backend(nkipy_cache="c1", runtime="cpu")
    with pytest.raises(
        ConfigurationError,
        match=r"already called with different settings \(nkipy_cache: .*c1.* -> .*c2",
    ):
        init_nkipy_backend(nkipy_cache="c2", runtime="cpu")


def test_rank_and_world_size_come_from_the_launcher_environment(plugin_env, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    cfg = init_nkipy_backend()
    assert (cfg.rank, cfg.world_size) == (1, 2)
    config.reset()
    assert init_nkipy_backend(rank=0, world_size=4).world_size == 4


def test_unknown_runtime_names_the_installed_ones(plugin_env):
    with pytest.raises(
        RuntimeNotFoundError,
        match=r"no runtime named 'trn9' is installed; installed runtimes: \['cpu'\]",
    ):
        init_nkipy_backend(runtime="trn9")
    config.reset()
    with pytest.raises(
        BackendCompilerFailed, match="RuntimeNotFoundError: no runtime named 'trn9'"
    ) as err:
        torch.compile(lambda a: a + 1, backend="nkipy", options={"runtime": "trn9"})(torch.ones(2))
    assert isinstance(
        err.value.inner_exception, RuntimeNotFoundError
    )  # dynamo wraps backend errors


class _NoHardware:
    name = "fake-nrt"
    priority = 100

    def available(self):
        return (
            False,
            "`neuronx-cc` not found on PATH; install nkipy-runtime[neuron] on a Trn1/Trn2 host",
        )


def test_unavailable_runtime_says_what_is_missing_and_default_skips_it(plugin_env):
    @hookimpl
    def nkipy_register_runtimes(registry):
        registry.register(_NoHardware())

    plugin_env.add(
        types.SimpleNamespace(nkipy_register_runtimes=nkipy_register_runtimes),
        "fake",
        "fake-runtime",
    )
    with pytest.raises(
        RuntimeUnavailableError,
        match=r"'fake-nrt' is not available on this machine: `neuronx-cc` not found on PATH",
    ):
        init_nkipy_backend(runtime="fake-nrt")
    config.reset()
    assert config.select_runtime(config.current()).name == "cpu"  # higher priority, but unavailable


def test_unknown_option_lists_valid_ones(plugin_env):
    with pytest.raises(
        BackendCompilerFailed,
        match=r"ConfigurationError: unknown nkipy option\(s\) \['cache'\]; valid options are \[",
    ):
        torch.compile(lambda a: a + 1, backend="nkipy", options={"cache": "x"})(torch.ones(2))


def test_cache_directory_that_cannot_be_created(plugin_env, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(
        BackendCompilerFailed,
        match=r"CacheError: the nkipy kernel cache directory .* cannot be created \(ENOTDIR: .*Pass a directory this process can create or read as init_nkipy_backend\(nkipy_cache=...\)",
    ):
        torch.compile(
            lambda a: a + 1, backend="nkipy", options={"nkipy_cache": str(blocker / "cache")}
        )(torch.ones(2))


def test_rank_and_world_size_come_from_torch_distributed_first(plugin_env, monkeypatch):
    import torch.distributed as dist

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv("RANK", "5")  # must lose against the initialised process group
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        cfg = init_nkipy_backend()
        assert (cfg.rank, cfg.world_size) == (0, 1)
    finally:
        dist.destroy_process_group()


def test_implicit_defaults_yield_to_the_first_explicit_call(plugin_env):
    implicit = config.current()  # what any first touch of the backend or the device does
    assert init_nkipy_backend() == implicit  # the same defaults, explicit or not
    config.reset()
    config.current()
    assert init_nkipy_backend(strict=True, nkipy_cache="c1").strict  # replaces, no conflict
    with pytest.raises(
        ConfigurationError,
        match=r"already called with different settings \(strict: True -> False\)",
    ):
        init_nkipy_backend(nkipy_cache="c1")  # explicit against explicit still conflicts


def test_default_log_level_leaves_the_nkipy_logger_alone(plugin_env):
    import logging

    logger = logging.getLogger("nkipy")
    before = logger.level
    try:
        logger.setLevel(logging.DEBUG)  # the application's logging configuration
        init_nkipy_backend()
        assert logger.level == logging.DEBUG
        config.reset()
        init_nkipy_backend(log_level=logging.ERROR)
        assert logger.level == logging.ERROR
    finally:
        logger.setLevel(before)
