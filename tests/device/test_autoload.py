"""The device exists only when asked for: inside `import torch` (torch's backend autoload) when
NKIPY_RUNTIME names a runtime, cheaply and without ever raising, or in code
(`register_device`, `init_nkipy_backend(runtime=...)`); TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns the
autoload off; no runtime is an error."""

import logging

import pytest
from fresh_python import python

from nkipy_core.device import autoload, registration

PLAIN_GLOO = (
    "import sys, torch, torch.distributed as dist\n"
    "import nkipy_core, nkipy_core.testing.pytest_plugin  # as pytest and backend='nkipy' do\n"
    "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)\n"
    "dist.barrier(device_ids=[0])\n"
    "dist.destroy_process_group()\n"
    "print(torch._C._get_accelerator(), torch.accelerator.current_accelerator(), hasattr(torch, 'nkipy'))\n"
    "try:\n    torch.randn(3).to('nkipy')\nexcept RuntimeError as e:\n    print('refused:', e)\n"
)


def test_without_opt_in_torch_is_as_without_nkipy():
    """torch makes a named PrivateUse1 backend its accelerator whatever the device says, and
    torch.distributed then asks it for barriers: no opt-in, no device, even after importing
    nkipy_core (pytest's plugin and the dynamo backend import it in every such program)."""
    result = python(PLAIN_GLOO, NKIPY_RUNTIME=None)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "cpu None False"
    assert lines[1].startswith("refused:") and "nkipy" in lines[1]


def test_naming_a_runtime_registers_the_device_inside_import_torch():
    result = python(
        "import sys, torch\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('nkipy_core', 'pluggy')))\n"
        "print('loaded at import:', loaded)\n"
        "t = torch.randn(3).to('nkipy')\n"
        "print(t.device, torch.equal(t.cpu() * 2, (t * 2).cpu()), torch.nkipy.is_available())\n",
        NKIPY_RUNTIME="cpu",
    )
    assert result.returncode == 0, result.stderr
    assert "nkipy:0 True True" in result.stdout
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


@pytest.mark.parametrize(
    "opt_in",
    [
        "nkipy_core.register_device()",
        "nkipy_core.init_nkipy_backend(runtime='cpu')",
    ],
)
def test_asking_in_code_registers_the_device(opt_in):
    result = python(
        "import torch, nkipy_core\n"
        "print(hasattr(torch, 'nkipy'))\n"
        f"{opt_in}\n"
        "print(torch.randn(3).to('nkipy').device, torch.accelerator.current_accelerator(check_available=True))\n",
        NKIPY_RUNTIME=None,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "False\nnkipy:0 nkipy\n"


def test_autoload_can_be_turned_off():
    result = python(
        "import sys, torch\n"
        "print('nkipy_core' in sys.modules)\n"
        "try:\n    torch.randn(3).to('nkipy')\nexcept RuntimeError as e:\n    print('refused:', e)\n"
        "import nkipy_core\n"
        "nkipy_core.register_device()\n"
        "print(torch.randn(3).to('nkipy').device)\n",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        NKIPY_RUNTIME="cpu",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "False"
    assert lines[1].startswith("refused:") and "nkipy" in lines[1]
    assert lines[2] == "nkipy:0"


def test_the_autoload_hook_never_raises(monkeypatch, caplog):
    def broken():
        raise RuntimeError("simulated registration failure")

    monkeypatch.setenv("NKIPY_RUNTIME", "cpu")
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
