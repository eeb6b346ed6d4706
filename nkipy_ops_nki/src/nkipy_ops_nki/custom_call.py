"""NKI launches as IR custom calls, and the host function the cpu runtime runs them with.

The custom call targets ``AwsNeuronCustomNativeKernel``, the HLO custom call ``neuronx-cc``
replaces with an NKI kernel. Its config is JSON holding the kernel's source, its launch grid and
how the kernel's arguments come from the call's operands: everything a device compiler's NKI
frontend or this pack's interpreter needs, and part of the kernel cache key, so editing a kernel
recompiles what uses it.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from nkipy_core import Unsupported, knp
from nkipy_core.ir import DType, TensorType

from .capture import Launch
from .interpreter import SpmdDim
from .kernel import KERNELS, NKIKernel

TARGET = "AwsNeuronCustomNativeKernel"
HOST = f"{__name__}:run"
#: the host functions custom calls may name in this module (nkipy_core's ``_custom_call``)
NKIPY_HOST_FUNCTIONS = ("run",)
FORMAT = "nkipy-nki/1"


def lower(launch: Launch, op: str, operands: Sequence[Any], out: TensorType) -> Any:
    """The custom call computing ``launch`` on ``operands`` (the traced inputs, in kernel order)."""
    try:
        launch.kernel.key  # noqa: B018 - reading the key reads the source: OSError if it has none
    except OSError:
        raise Unsupported(
            f"the source of {launch.kernel!r} is not available (define kernels in a file)"
        ) from None
    config = {
        "format": FORMAT,
        "op": op,
        "kernel": launch.kernel.key,
        "source": launch.kernel.source,
        "grid": [_grid_dim(d) for d in launch.grid],
        "args": [list(a) for a in launch.args],
        "result": list(launch.result),
    }
    return knp.custom_call(
        operands,
        target=TARGET,
        config=json.dumps(config, sort_keys=True),
        host=HOST,
        shape=out.shape,
        dtype=out.dtype,
    )


def _grid_dim(dim: Any) -> Any:
    if isinstance(dim, SpmdDim):
        return {"spmd": dim.programs, "nc": dim.cores}
    return int(dim)


def run(config: str, *operands: np.ndarray) -> np.ndarray:
    """The custom call on host arrays: the kernel on the interpreter (the call's ``host``)."""
    spec = json.loads(config)
    kernel = find_kernel(spec["kernel"])
    grid = tuple(SpmdDim(d["spmd"], d["nc"]) if isinstance(d, dict) else d for d in spec["grid"])
    given = iter(operands)
    args: list[Any] = []
    for kind, *rest in spec["args"]:
        if kind == "input":
            args.append(next(given))
        elif kind == "zeros":
            shape, dtype = rest
            args.append(np.zeros(shape, DType.from_torch(getattr(torch, dtype)).numpy))
        else:
            args.append(rest[0])
    results = kernel.run_arrays(grid, args)
    kind, index = spec["result"]
    return results[index] if kind == "returned" else args[index]


def find_kernel(key: str) -> NKIKernel:
    """The kernel a config names: made in this process, or imported from where it is defined
    (a kernel.py run on its own); its source must still be the one the config was made from."""
    if key in KERNELS:
        return KERNELS[key]
    module, _, rest = key.partition(":")
    qualname = rest.partition("#")[0]
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        raise RuntimeError(
            f"NKI kernel {module}.{qualname} is not defined in this process and cannot be imported: "
            "run the program that defines it (kernels in functions or __main__ are found only there)"
        ) from None
    kernel = found if isinstance(found, NKIKernel) else NKIKernel(getattr(found, "fn", found))
    if kernel.key != key:
        raise RuntimeError(
            f"NKI kernel {module}.{qualname} has changed since this kernel was compiled "
            f"({kernel.key} now, {key} then): clear the nkipy cache entry or recompile"
        )
    return kernel
