"""Tensor-parallel greedy generation of a Hugging Face Llama over two ranks, compiled by nkipy.

    torchrun --nproc-per-node 2 examples/hf_llama/tp_generate.py [--checkpoint PATH]

The model is sharded by its own tensor-parallel plan (``config.base_model_tp_plan``: q/k/v and
gate/up column-wise, o and down row-wise), applied with ``torch.distributed.tensor.parallel``
over a ``nkipy`` DeviceMesh (the ``nkipy`` process group): each rank holds half of the attention
and key/value heads and of the MLP units, its ``StaticCache`` holds its own key/value heads, and
the all-reduces after o and down run inside the compiled kernels. Embeddings, norms and the LM
head are replicated. Rank 0 compares the greedy tokens with the single-process eager model's and
prints one line: match, kernels, ops on CPU, graphs compiled after the first decode step.
"""

from __future__ import annotations

import argparse
import tempfile

import torch
import torch.distributed as dist
from generate import Watched, greedy, load_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from transformers import LlamaForCausalLM

from nkipy_core import cache_stats, init_nkipy_backend

#: torch's parallel styles for the style names of transformers' TP plans
STYLES = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}


def tensor_parallel(model: LlamaForCausalLM, mesh) -> LlamaForCausalLM:
    """``model`` sharded over ``mesh`` by its own ``base_model_tp_plan``. Llama's attention
    reshapes to ``(-1, head_dim)``, so the column-wise q/k/v outputs are read as the local heads."""
    plan = {
        f"model.{name}": STYLES[style]() for name, style in model.config.base_model_tp_plan.items()
    }
    return parallelize_module(model, mesh, plan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--checkpoint", help="a local Hugging Face Llama checkpoint directory (no download)"
    )
    parser.add_argument("--prompt-length", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument(
        "--runtime", default="cpu", help="nkipy runtime (xla: the collectives run between kernels)"
    )
    args = parser.parse_args(argv)

    dist.init_process_group("nkipy")
    init_nkipy_backend(runtime=args.runtime, nkipy_cache=tempfile.mkdtemp(prefix="nkipy-llama-tp-"))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("nkipy", (world,))

    reference = load_model(args.checkpoint)
    prompt = torch.randint(
        0,
        reference.config.vocab_size,
        (1, args.prompt_length),
        generator=torch.Generator().manual_seed(0),
    )
    expected = greedy(reference.forward, reference, prompt, args.new_tokens)

    model = tensor_parallel(load_model(args.checkpoint).to("nkipy"), mesh)
    forward = Watched(torch.compile(model.forward, backend="nkipy", dynamic=False))
    tokens = greedy(forward, model, prompt.to("nkipy"), args.new_tokens)
    match = torch.equal(tokens.cpu(), expected)
    graphs, lookups = forward.after_first_decode
    if rank == 0:
        print(f"tokens: {tokens.cpu()[0].tolist()}")
        print(
            f"ranks {world}: matches single-process eager: {match}; kernels {forward.kernels}; "
            f"ops on CPU {cache_stats['fallback_ops']}; after the first decode step: {graphs} graphs compiled, "
            f"{lookups} kernels looked up"
        )
    dist.barrier()
    dist.destroy_process_group()
    return 0 if match and (graphs, lookups) == (0, 0) else 1


if __name__ == "__main__":
    raise SystemExit(main())
