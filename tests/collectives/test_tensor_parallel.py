"""Tensor parallelism with ``torch.distributed.tensor.parallel`` over a ``nkipy`` DeviceMesh: the
example of examples/distributed shards a Llama-style block over two real processes (torchrun),
compiles it with nkipy and compares its output and gathered parameter gradients with the
single-process block."""

from __future__ import annotations

from pathlib import Path

from torchrun import torchrun

EXAMPLE = Path(__file__).parents[2] / "examples" / "distributed" / "tp_block.py"


def test_the_tensor_parallel_block_matches_the_single_process_block():
    done = torchrun(str(EXAMPLE))
    assert done.returncode == 0, done.stderr[-3000:]
    # one kernel for the forward, one for the backward, each with its collectives inside
    assert (
        "ranks 2: matches the single-process block, forward and backward; kernels 2; ops on CPU 0"
        in done.stdout
    ), done.stdout
