"""The device registers itself inside `import torch` (torch's backend autoload), cheaply and
without ever raising; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns that off; no runtime is an error."""

import logging

import pytest
from fresh_python import python

from nkipy_core.device import autoload, registration


def test_fresh_interpreter_has_the_device_without_importing_nkipy():
    result = python(
        "import sys, torch\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('nkipy_core', 'pluggy')))\n"
        "print('loaded at import:', loaded)\n"
        "t = torch.randn(3).to('nkipy')\n"
        "print(t.device, torch.equal(t.cpu() * 2, (t * 2).cpu()), torch.nkipy.is_available())\n"
    )
    assert result.returncode == 0, result.stderr
    # explicit use works; the cpu simulator still does not claim to be the machine's accelerator
    assert "nkipy:0 True False" in result.stdout
    loaded = result.stdout.splitlines()[0]
    # cheap: the hook imports the device registration only; no plugin scan, compiler or IR
    for heavy in (
        "pluggy",
        "nkipy_core.plugin.manager",
        "nkipy_core.compiler.pipeline",
        "nkipy_core.ir",
        "nkipy_core.buffers.memory",
    ):
        assert f"'{heavy}'" not in loaded, loaded
    assert "'nkipy_core.device.registration'" in loaded


def test_autoload_can_be_turned_off():
    result = python(
        "import sys, torch\n"
        "print('nkipy_core' in sys.modules)\n"
        "try:\n    torch.randn(3).to('nkipy')\nexcept RuntimeError as e:\n    print('refused:', e)\n"
        "import nkipy_core\n"
        "print(torch.randn(3).to('nkipy').device)\n",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "False"
    assert lines[1].startswith("refused:") and "nkipy" in lines[1]
    assert lines[2] == "nkipy:0"  # importing nkipy_core registers it


def test_the_autoload_hook_never_raises(monkeypatch, caplog):
    def broken():
        raise RuntimeError("simulated registration failure")

    monkeypatch.setattr(registration, "register", broken)
    with caplog.at_level(logging.WARNING, logger="nkipy"):
        assert autoload.autoload() is None
    assert (
        "the nkipy device was not registered (RuntimeError: simulated registration failure)"
        in caplog.text
    )


def test_registration_is_idempotent():
    import torch

    registration.register()
    registration.register()
    assert torch.randn(2).to("nkipy").device.type == "nkipy"


@pytest.mark.parametrize("runtime", ["nrt", "missing"])
def test_device_without_a_runtime_is_a_clear_error(runtime):
    result = python(
        "import torch\n"
        "print(torch.nkipy.is_available(), torch.nkipy.device_count())\n"
        "torch.randn(3).to('nkipy')\n",
        NKIPY_RUNTIME=runtime,
    )
    assert result.returncode != 0
    assert result.stdout.strip() == "False 0"
    assert (
        f"RuntimeNotFoundError: the nkipy device cannot be used: no runtime named '{runtime}' is "
        "installed; installed runtimes: ['cpu']. Install the pack that provides it"
    ) in result.stderr
