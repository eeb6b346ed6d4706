"""A TorchTitan config registry: Llama-3 ``debugmodel`` sized for a CPU-only machine, with SDPA.

TorchTitan finds configs by ``--module <module> --config <function>``; a fully qualified module
name that is importable works as well as its own ``llama3``. This module changes nothing in
TorchTitan: ``llama3_debugmodel_sdpa`` starts from TorchTitan's ``llama3_debugmodel()`` and
changes only what a machine without CUDA needs, each change explained where it is made.
Everything else (sizes, steps, parallelism) stays a CLI override, e.g.
``--training.steps 5 --parallelism.data_parallel_shard_degree 2``.
"""

from __future__ import annotations

import os

from torchtitan.models.common.attention import ScaledDotProductAttention
from torchtitan.models.llama3.config_registry import llama3_debugmodel
from torchtitan.trainer import Trainer

# The directory `make_assets.py --out` wrote (tokenizer/ and dataset/).
ASSETS_ENV = "TITAN_ASSETS"


def llama3_debugmodel_sdpa() -> Trainer.Config:
    config = llama3_debugmodel()

    # Attention: TorchTitan's language models use FlexAttention (or CUDA's varlen). Flex runs as
    # `torch.compile(flex_attention)` through Inductor, which generates no code for an
    # out-of-tree device such as nkipy. SDPA's math path is plain ATen ops and runs anywhere.
    # TorchTitan's own graph_trainer tests swap the attention the same way. SDPA is causal
    # over the whole packed sequence (documents are not masked from each other), which is a
    # different model from flex's document mask but the same on every device.
    for layer in config.model_spec.model.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()

    # Offline assets: the debug config reads tests/assets/ of TorchTitan's source tree, which
    # its wheel does not ship. make_assets.py makes a tokenizer and a c4_test-shaped dataset.
    assets = os.environ.get(ASSETS_ENV)
    if assets:
        config.hf_assets_path = os.path.join(assets, "tokenizer")
        config.dataloader.dataset_path = os.path.join(assets, "dataset")

    # Small and short: a CPU step in seconds. Overridable from the CLI.
    config.training.seq_len = 128
    config.training.local_batch_size = 2
    config.training.steps = 5
    config.lr_scheduler.warmup_steps = 2

    # FSDP's parameter dtype: float32 keeps the comparison between devices tight (TorchTitan's
    # default, bfloat16, is also what a real run on Trainium would use).
    config.training.mixed_precision_param = "float32"

    # Determinism: a fixed seed, and deterministic algorithms.
    config.debug.seed = 42
    config.debug.deterministic = True

    # No CUDA graphs, no checkpoint writes, no validation pass, no activation
    # checkpointing (the CLI's `activation_checkpoint:selective` / `:full` turn it on).
    config.training.disable_cuda_graphs = True
    config.checkpoint.enable = False
    config.validator.enable = False
    config.activation_checkpoint = None

    config.dump_folder = os.environ.get("TITAN_DUMP_FOLDER", "./outputs")
    return config
