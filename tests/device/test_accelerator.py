"""The device is torch's accelerator only on hardware or when asked: ``torch.nkipy.is_available()``
(which ``torch.accelerator`` delegates to) is False for the ``cpu`` simulator unless the user named
it, so programs that pick "the accelerator if there is one" stay on CPU."""

import types

import pytest
import torch
from fresh_python import python

from nkipy_core import ConfigurationError, init_nkipy_backend
from nkipy_core.buffers import memory
from nkipy_core.config import settings as config
from nkipy_core.plugin import manager as plugins

ACCELERATOR = (
    "import sys, torch\n"
    "acc = torch.accelerator\n"
    "device = acc.current_accelerator() if acc.is_available() else 'cpu'\n"
    "print(acc.is_available(), acc.current_accelerator(check_available=True), acc.device_count(), device,"
    " 'torch._dynamo' in sys.modules, 'nkipy_core.runtime.cpu' in sys.modules)\n"
)


def test_torch_accelerator_is_unchanged_by_installing_nkipy():
    without = python(ACCELERATOR, TORCH_DEVICE_BACKEND_AUTOLOAD="0", NKIPY_RUNTIME=None)
    with_nkipy = python(ACCELERATOR, NKIPY_RUNTIME=None)
    assert without.returncode == 0 and with_nkipy.returncode == 0, (
        without.stderr + with_nkipy.stderr
    )
    assert without.stdout == "False None 0 cpu False False\n"
    # and registering the device imported neither dynamo nor, to answer, any plugin
    assert with_nkipy.stdout == without.stdout


@pytest.mark.parametrize(
    ("opt_in", "env"),
    [
        ("", "cpu"),
        ("from nkipy_core import init_nkipy_backend; init_nkipy_backend(runtime='cpu')\n", None),
    ],
)
def test_naming_the_cpu_runtime_makes_it_the_accelerator(opt_in, env):
    result = python(opt_in + ACCELERATOR, NKIPY_RUNTIME=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True nkipy 1 nkipy False True\n"


@pytest.fixture
def defaults(monkeypatch):
    monkeypatch.delenv("NKIPY_RUNTIME", raising=False)
    config.reset()


def test_registered_without_a_request_the_simulator_is_not_the_accelerator(defaults):
    x = torch.arange(4.0).to("nkipy")
    assert torch.equal((x * 2).cpu(), torch.arange(4.0) * 2)
    assert not torch.nkipy.is_available()
    assert torch.nkipy.device_count() == 0  # torch's contract: no available device, count 0


def test_a_hardware_runtime_is_the_accelerator_without_opt_in(defaults, monkeypatch):
    hardware = types.SimpleNamespace(name="fake-trn", hardware=True)
    monkeypatch.setattr(config, "select_runtime", lambda cfg: hardware)
    monkeypatch.setattr(plugins, "_loaded", None)  # as in a program that never used nkipy
    monkeypatch.setattr(plugins, "_extra", [])
    monkeypatch.setattr(plugins, "hardware_present", lambda: False)
    assert not torch.nkipy.is_available()  # no probe saw hardware: no plugin is loaded to ask
    monkeypatch.setattr(plugins, "hardware_present", lambda: True)  # a pack's probe sees a device
    assert torch.nkipy.is_available()
    monkeypatch.setattr(hardware, "hardware", False)
    assert not torch.nkipy.is_available()


def test_is_available_configures_nothing(defaults):
    assert not torch.nkipy.is_available()
    assert config._config is None  # a question is not a configuration
    assert init_nkipy_backend(runtime="cpu", strict=True).strict
    assert torch.nkipy.is_available()


def test_naming_another_runtime_after_the_device_holds_tensors_is_an_error(defaults, monkeypatch):
    monkeypatch.setattr(memory, "_runtime", types.SimpleNamespace(name="cpu"))
    monkeypatch.setattr(
        config, "select_runtime", lambda cfg: types.SimpleNamespace(name="fake-trn")
    )
    with pytest.raises(
        ConfigurationError,
        match=r"the nkipy device already holds tensors on runtime 'cpu' .* "
        r"call init_nkipy_backend\(runtime='fake-trn'\) before the first use of the device",
    ):
        init_nkipy_backend(runtime="fake-trn")


def test_init_after_torchs_opinfo_database_touched_the_device():
    """Importing OpInfo asks ``torch.accelerator``; that must not stand in the way of the first call."""
    result = python(
        "import torch.testing._internal.common_methods_invocations\n"
        "from nkipy_core import init_nkipy_backend\n"
        "print(init_nkipy_backend(strict=True).strict)\n",
        NKIPY_RUNTIME=None,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True\n"


def test_no_runtime_is_asked_while_no_probe_sees_hardware(defaults, monkeypatch):
    """torch's fake tensors ask once per traced op, and a runtime's ``available()`` may probe the
    machine in a subprocess: with nkipy's plugins loaded too, the probes alone answer."""
    plugins.get()
    asked = []
    monkeypatch.setattr(config, "select_runtime", asked.append)
    monkeypatch.setattr(plugins, "hardware_present", lambda: False)
    assert not torch.nkipy.is_available()
    assert asked == []
