"""A tensor-parallel Llama-style block (attention + SwiGLU MLP) compiled with nkipy, forward and backward.

Run with two processes (CPU is enough: the ``cpu`` runtime runs the kernels and their collectives
through gloo)::

    torchrun --nproc-per-node 2 examples/distributed/tp_block.py

``torch.distributed.tensor.parallel`` shards the block as Megatron-style recipes do: q/k/v and
gate/up column-wise (each rank holds half of the heads and of the intermediate units), o and down
row-wise (their partial outputs are summed by an all-reduce). Each rank then computes attention for
its own heads, so the block's head count is divided by the mesh size.

The mesh is a ``cpu`` DeviceMesh over the ``nkipy`` process group (``init_process_group("nkipy")``):
the parameters and activations are CPU tensors that the ``cpu`` runtime reads, and the collectives
DTensor issues go through the ``nkipy`` group, compiled into the kernels.

Rank 0 compares the output and every parameter gradient (gathered to full tensors) with the
single-process block and prints one line: match, kernels, ops on CPU.
"""

from __future__ import annotations

import dataclasses
import tempfile
import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import nkipy_core
from nkipy_core import init_nkipy_backend
from nkipy_core.testing.models import LlamaBlock

PLAN = {
    **{name: ColwiseParallel() for name in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")},
    **{name: RowwiseParallel() for name in ("o_proj", "down_proj")},
}


def tensor_parallel(block: LlamaBlock, mesh) -> LlamaBlock:
    """``block`` sharded by ``PLAN`` over ``mesh``, attending over its local heads only."""
    world = mesh.size()
    config = block.config
    parallelize_module(block, mesh, PLAN)
    # the column-wise q/k/v outputs hold heads/world heads of unchanged size
    block.config = dataclasses.replace(config, heads=config.heads // world, hidden=config.hidden // world)
    return block


def gradients(block: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient as a full tensor (DTensor shards gathered)."""
    return {name: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad)
            for name, p in block.named_parameters()}


def main() -> None:
    dist.init_process_group("nkipy")
    # one cache per rank keeps the kernel count honest
    init_nkipy_backend(runtime="cpu", nkipy_cache=tempfile.mkdtemp(prefix="nkipy-tp-"))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))

    reference = LlamaBlock()
    x = reference.example_input()
    expected = reference(x)
    expected.sum().backward()

    block = tensor_parallel(LlamaBlock(), mesh)
    compiled = torch.compile(block, backend="nkipy", dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(x)
        out.sum().backward()
    fallbacks = [w for w in caught if issubclass(w.category, nkipy_core.FallbackWarning)]
    got = gradients(block)
    kernels = nkipy_core.cache_stats["lowered_kernels"]  # a fresh cache: every kernel is lowered once
    if rank == 0:
        torch.testing.assert_close(out, expected)
        for name, param in reference.named_parameters():
            torch.testing.assert_close(got[name], param.grad, msg=lambda m, name=name: f"gradient of {name}: {m}")
        print(f"ranks {world}: matches the single-process block, forward and backward; "
              f"kernels {kernels}; ops on CPU {len(fallbacks)}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
