"""Launch TorchTitan's trainer, on the machine's accelerator or, with ``--device cpu``, on CPU.

    torchrun --nproc-per-node 2 examples/torchtitan/run.py [--device cpu] -- <torchtitan arguments>

Without ``--device cpu`` this is ``python -m torchtitan.train`` (plus ``torch_compat()`` below): TorchTitan picks the
device from torch (``torch._utils._get_available_device_type()``, the accelerator torch knows:
``nkipy`` when ``NKIPY_RUNTIME`` is set) and the process-group backend from
``torch.distributed.Backend.default_device_backend_map`` for that device.

``--device cpu`` is for the reference run. TorchTitan has no CPU mode: with no accelerator it
takes ``cuda`` as the device and fails in ``torch.cuda.set_device``. This driver sets TorchTitan's
module-level ``device_type``/``device_module`` to ``cpu`` and a stand-in for the few
``torch.cuda``-style calls it makes (memory statistics, device name), before its other modules
import them. The process group is then gloo, torch's default for ``cpu``.

One more thing TorchTitan cannot do on gloo: it sets every FSDP module's gradient divide factor
to 1.0 (it scales by the global token count itself), for which FSDP2 reduce-scatters with
``ReduceOp.PREMUL_SUM(1.0)``, an op gloo does not have. With a factor of 1.0 that is a plain SUM,
so on CPU this driver also asks FSDP for SUM (``set_force_sum_reduction_for_comms``): the same
numbers, an op gloo has.
"""

from __future__ import annotations

import sys
import types


def _cpu_device_module() -> types.ModuleType:
    import torch

    mod = types.ModuleType("titan_cpu_device")
    for name in ("device_count", "is_available", "synchronize", "Stream", "Event"):
        setattr(mod, name, getattr(torch.cpu, name))
    # an index, as torch.cuda's: TorchTitan passes it to barrier(device_ids=[...])
    mod.current_device = lambda: 0
    mod.set_device = lambda device: None
    mod.get_device_name = lambda device=None: "cpu"
    mod.get_device_properties = lambda device=None: types.SimpleNamespace(
        name="cpu", total_memory=1
    )
    mod.memory_stats = lambda device=None: {}
    mod.reset_peak_memory_stats = lambda device=None: None
    mod.empty_cache = lambda: None
    return mod


def use_cpu() -> None:
    """Make TorchTitan run on CPU (idempotent).

    ``torchtitan.tools.utils`` computes ``device_type``/``device_module`` at import and several
    modules copy them (``from torchtitan.tools.utils import device_type``): every loaded
    torchtitan module that holds them gets the CPU ones, and modules loaded later copy them from
    ``tools.utils``.
    """
    import torchtitan.tools.utils as utils

    if utils.device_type == "cpu":
        return
    cpu_module = _cpu_device_module()
    for name, module in list(sys.modules.items()):
        if name.startswith("torchtitan") and module is not None:
            if getattr(module, "device_type", None) == utils.device_type:
                module.device_type = "cpu"
            if getattr(module, "device_module", None) is utils.device_module:
                module.device_module = cpu_module
    utils.device_type = "cpu"
    utils.device_module = cpu_module

    import torchtitan.distributed.fsdp as titan_fsdp
    from torch.distributed.fsdp import FSDPModule

    disable_division = titan_fsdp.disable_fsdp_gradient_division

    def disable_division_with_sum(model):
        disable_division(model)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)

    titan_fsdp.disable_fsdp_gradient_division = disable_division_with_sum


def torch_compat() -> None:
    """Give torch 2.13 the one torch.distributed function TorchTitan 0.3 calls that it lacks.

    TorchTitan 0.3 is written against torch nightlies; after its first step it calls
    ``torch.distributed.set_timeout(timeout, group)``, which torch 2.13 has as the private
    ``distributed_c10d._set_pg_timeout`` (same arguments).
    """
    import torch.distributed as dist

    if not hasattr(dist, "set_timeout"):
        from torch.distributed.distributed_c10d import _set_pg_timeout

        dist.set_timeout = _set_pg_timeout


def main(argv: list[str]) -> None:
    device = None
    if argv[:1] == ["--device"]:
        device, argv = argv[1], argv[2:]
    elif argv[:1] and argv[0].startswith("--device="):
        device, argv = argv[0].split("=", 1)[1], argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if device not in (None, "cpu"):
        raise SystemExit(
            f"--device takes only 'cpu' (got {device!r}); leave it out to use torch's accelerator"
        )
    torch_compat()
    if device == "cpu":
        use_cpu()
    from torchtitan.train import main as titan_main

    sys.argv = [sys.argv[0], *argv]
    titan_main()


if __name__ == "__main__":
    main(sys.argv[1:])
