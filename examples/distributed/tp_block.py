"""A tensor-parallel Llama-style block (attention + SwiGLU MLP) compiled with nkipy, forward and backward.

Run with two processes (CPU is enough: the ``cpu`` runtime runs the kernels and their collectives
through gloo)::

    torchrun --nproc-per-node 2 examples/distributed/tp_block.py

``torch.distributed.tensor.parallel`` shards the block as Megatron-style recipes do: q/k/v and
gate/up column-wise (each rank holds half of the heads and of the intermediate units), o and down
row-wise (their partial outputs are summed by an all-reduce). Each rank then computes attention for
its own heads, so the block's head count is divided by the mesh size.

The mesh is a ``nkipy`` DeviceMesh (``init_device_mesh("nkipy", ...)`` over the ``nkipy`` process
group): the parameter shards and activations are ``nkipy`` tensors, the collectives DTensor issues
in the compiled forward and backward are lowered into their kernels, and the eager ones (sharding
the parameters, gathering the gradients) go through the process group.

Rank 0 compares the output and every parameter gradient (gathered to full tensors) with the
single-process block on CPU and prints one line: match, the kernels of the compiled forward and
backward, ops on CPU.
"""

from __future__ import annotations

import dataclasses
import tempfile
import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
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
    # the column-wise q/k/v outputs hold heads/world heads of unchanged size (head_dim is hidden // heads)
    block.config = dataclasses.replace(
        config, heads=config.heads // world, hidden=config.hidden // world
    )
    return block


def gradients(block: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient as a full tensor (DTensor shards gathered)."""
    return {
        name: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad)
        for name, p in block.named_parameters()
    }


def main() -> None:
    dist.init_process_group("nkipy")
    init_nkipy_backend(runtime="cpu", nkipy_cache=tempfile.mkdtemp(prefix="nkipy-tp-"))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("nkipy", (world,))

    reference = LlamaBlock()
    x = reference.example_input()
    expected = reference(x)
    expected.backward(torch.ones_like(expected))

    block = tensor_parallel(LlamaBlock().to("nkipy"), mesh)
    compiled = torch.compile(block, backend="nkipy", dynamic=False)
    x, seed = x.to("nkipy"), torch.ones(expected.shape, device="nkipy")
    torch.nkipy.synchronize()  # the eager ops queued so far (the copies, the seed) run first
    # a fresh cache: every kernel is lowered once, so counting lowerings counts kernels
    kernels = nkipy_core.cache_stats["lowered_kernels"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(x)
        out.backward(seed)
    kernels = nkipy_core.cache_stats["lowered_kernels"] - kernels
    fallbacks = [w for w in caught if issubclass(w.category, nkipy_core.FallbackWarning)]
    got = gradients(block)
    if rank == 0:
        torch.testing.assert_close(out.cpu(), expected)
        for name, param in reference.named_parameters():
            torch.testing.assert_close(
                got[name].cpu(), param.grad, msg=lambda m, name=name: f"gradient of {name}: {m}"
            )
        print(
            f"ranks {world}: matches the single-process block, forward and backward; "
            f"kernels {kernels}; ops on CPU {len(fallbacks)}"
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
