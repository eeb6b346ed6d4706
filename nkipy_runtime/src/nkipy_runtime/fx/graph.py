"""A kernel as one FX graph of ATen operations, traced from its ops' torch rules (``rules``).

The graph takes the kernel's parameters and returns its outputs, except those ``writes`` puts
into a parameter: the graph copies each of those into its parameter (``copy_``), which
TorchInductor turns into the store of the loop that computes it, so an optimizer step updates
its tensors where they lie. It is traced with fake tensors: nothing is computed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from nkipy_core.ir import Kernel

from . import rules


def trace(kernel: Kernel, writes: Sequence[tuple[int, int]] = ()) -> torch.fx.GraphModule:
    """The FX graph of ``kernel``; with ``writes``, pairs ``(output, parameter)``, the graph
    writes each such output into its parameter and returns the other outputs only."""
    written = {k for k, _ in writes}

    def run(*params: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values = {p.id: t for p, t in zip(kernel.params, params)}
        for op in kernel.ops:
            values[op.result.id] = rules.run(
                op.prim,
                [values[v.id] for v in op.operands],
                op.params,
                [v.type for v in op.operands],
                op.result.type,
            )
        outputs = [values[v.id] for v in kernel.outputs]
        for k, j in writes:
            params[j].copy_(outputs[k])
        return tuple(o for k, o in enumerate(outputs) if k not in written)

    return make_fx(run, tracing_mode="fake")(*examples(kernel))


def examples(kernel: Kernel) -> list[torch.Tensor]:
    """Tensors of the kernel's parameter types (zeros): what TorchInductor specialises on."""
    return [torch.zeros(p.type.shape, dtype=p.type.dtype.torch) for p in kernel.params]
