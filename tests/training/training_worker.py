"""One rank of ``test_training_stacks.py``: training code written for "the accelerator", run
unchanged on CPU/gloo and on ``nkipy`` (the test sets ``NKIPY_RUNTIME=cpu`` for the latter).

Nothing here names nkipy: the device is ``torch.accelerator``'s (CPU when there is none) and the
process group is ``init_process_group()``'s default for it, as TorchNeuron's users write for
Trainium. Each case trains a small model for a few steps with one of torch's parallelisms and
records what the test compares across the two runs: per-step losses and, where it matters, the
final parameters (as full tensors). A case's failure is recorded as its traceback.

usage: training_worker.py OUT_DIR CASE...     (writes OUT_DIR/rank<r>.json)
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

STEPS = 3


def accelerator() -> torch.device:
    acc = torch.accelerator.current_accelerator(check_available=True)
    return torch.device(acc.type if acc is not None else "cpu")


DEVICE = accelerator()


class Block(nn.Module):
    """A residual MLP block with a norm: what FSDP shards per layer."""

    def __init__(self, dim: int = 16, hidden: int = 32):
        super().__init__()
        self.norm = nn.RMSNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.silu(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self, layers: int = 2, dim: int = 16):
        super().__init__()
        self.layers = nn.ModuleList(Block(dim) for _ in range(layers))
        self.head = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def model() -> Model:
    """The same initial weights on every rank and in both runs (built on CPU, then moved)."""
    torch.manual_seed(0)
    return Model()


def batch(step: int, rows: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank- and step-dependent data, the same in both runs."""
    g = torch.Generator().manual_seed(100 * step + dist.get_rank())
    x, y = torch.randn(rows, 16, generator=g), torch.randn(rows, 4, generator=g)
    return x.to(DEVICE), y.to(DEVICE)


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out.float(), target)


def full_params(module: nn.Module) -> dict[str, list]:
    """Every parameter as a full CPU tensor (DTensor shards gathered), as lists for JSON."""
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in module.named_parameters():
        t = p.full_tensor() if isinstance(p, DTensor) else p
        out[name] = t.detach().float().cpu().reshape(-1).tolist()
    return out


# -- DDP --------------------------------------------------------------------------------------


def _ddp(hook=None, compiled: bool = False) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    # a tiny bucket cap: several buckets, each all-reduced as soon as its gradients are ready
    # (compiled: dynamo's DDP graph splitter refuses caps below its 1 MiB first bucket)
    ddp = DDP(model().to(DEVICE), bucket_cap_mb=None if compiled else 0.001)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    run = ddp
    if compiled and DEVICE.type != "cpu":  # the reference is the same training in CPU eager
        # dynamo compiles the wrapped module, split at the buckets; DDP's reducer calls the
        # group from C++ inside the compiled forward
        run = torch.compile(ddp, backend="nkipy")
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        with ddp.no_sync():  # gradient accumulation: the first micro-batch is not reduced
            x, y = batch(10 + step)
            loss_fn(run(x), y).backward()
        x, y = batch(step)
        loss = loss_fn(run(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "params": full_params(ddp.module)}


def ddp() -> dict:
    return _ddp()


def ddp_compiled() -> dict:
    return _ddp(compiled=True)


def ddp_fp16_hook() -> dict:
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

    return _ddp(fp16_compress_hook)


# -- FSDP2 ------------------------------------------------------------------------------------


def _fsdp2(
    reshard: bool = True,
    mixed: bool = False,
    compiled: bool = False,
    checkpointed: bool = False,
    steps: int = STEPS,
    module: nn.Module | None = None,
):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(DEVICE.type, (dist.get_world_size(),))
    net = module if module is not None else model()
    if checkpointed:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            checkpoint_wrapper,
        )

        for i, layer in enumerate(net.layers):
            net.layers[i] = checkpoint_wrapper(layer)
    net = net.to(DEVICE)
    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if mixed
        else MixedPrecisionPolicy()
    )
    for layer in net.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    fully_shard(net, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    run = net
    if compiled and DEVICE.type != "cpu":  # the reference is the same training in CPU eager
        run = torch.compile(net, backend="nkipy")
    return net, run


def _train(net: nn.Module, run, opt, first_step: int, steps: int) -> list[float]:
    losses = []
    for step in range(first_step, first_step + steps):
        opt.zero_grad()
        x, y = batch(step)
        loss = loss_fn(run(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _fsdp2_case(**kwargs) -> dict:
    net, run = _fsdp2(**kwargs)
    opt = torch.optim.AdamW(net.parameters(), lr=0.01)
    losses = _train(net, run, opt, 0, STEPS)
    return {"losses": losses, "params": full_params(net)}


def fsdp2() -> dict:
    return _fsdp2_case()


def fsdp2_no_reshard() -> dict:
    return _fsdp2_case(reshard=False)


def fsdp2_bf16() -> dict:
    return _fsdp2_case(mixed=True)


def fsdp2_compiled() -> dict:
    return _fsdp2_case(compiled=True)


def fsdp2_checkpointed() -> dict:
    return _fsdp2_case(checkpointed=True)


def dcp_resume() -> dict:
    """Train 2 steps, save model and optimizer with torch.distributed.checkpoint, train 2 more;
    a fresh model and optimizer loaded from the checkpoint must train those 2 steps the same."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    net, run = _fsdp2()
    opt = torch.optim.AdamW(net.parameters(), lr=0.01)
    before = _train(net, run, opt, 0, 2)
    # every rank must write to the same directory: rank 0 makes it, the others learn its name
    where = [tempfile.mkdtemp(prefix="nkipy-dcp-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(where, src=0)
    model_state, optim_state = get_state_dict(net, opt)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=where[0])
    after = _train(net, run, opt, 2, 2)

    torch.manual_seed(1)  # different initial weights: everything must come from the checkpoint
    fresh, fresh_run = _fsdp2(module=Model())
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.01)
    _train(fresh, fresh_run, fresh_opt, 0, 1)  # give the optimizer state to overwrite
    model_state, optim_state = get_state_dict(fresh, fresh_opt)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=where[0])
    set_state_dict(
        fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )
    resumed = _train(fresh, fresh_run, fresh_opt, 2, 2)
    return {"losses": before + after, "resumed": resumed}


def checkpoint_rng() -> dict:
    """Activation checkpointing replays the forward in the backward with the RNG state the
    forward had: dropout must draw the same mask again, so the gradients equal the plain ones."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    layer = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5), nn.Linear(16, 16)).to(DEVICE)
    x, _ = batch(0)
    grads = []
    for checkpointed in (False, True):
        layer.zero_grad()
        torch.manual_seed(5)
        out = checkpoint(layer, x, use_reentrant=False) if checkpointed else layer(x)
        out.pow(2).mean().backward()
        grads.append([p.grad.cpu() for p in layer.parameters()])
    return {"same_gradients": all(torch.equal(a, b) for a, b in zip(*grads))}


# -- pipeline parallelism ---------------------------------------------------------------------


def _pipeline(schedule_name: str) -> dict:
    """Two stages, one per rank: the first two blocks on rank 0, the last block and head on 1."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    schedule_cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule_name]
    torch.manual_seed(0)
    full = Model(layers=3)
    rank = dist.get_rank()
    if rank == 0:
        part = nn.Sequential(full.layers[0], full.layers[1])
    else:
        part = nn.Sequential(full.layers[2], full.head)
    part = part.to(DEVICE)
    stage = PipelineStage(part, rank, 2, DEVICE)
    schedule = schedule_cls(stage, n_microbatches=4, loss_fn=loss_fn)
    opt = torch.optim.SGD(part.parameters(), lr=0.1)
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        g = torch.Generator().manual_seed(step)  # the same batch on both ranks
        x, y = torch.randn(8, 16, generator=g).to(DEVICE), torch.randn(8, 4, generator=g)
        if rank == 0:
            schedule.step(x)
        else:
            micro: list[torch.Tensor] = []
            schedule.step(target=y.to(DEVICE), losses=micro)
            losses.append(sum(m.item() for m in micro) / len(micro))
        opt.step()
    return {"losses": losses, "params": full_params(part)}


def pipeline_gpipe() -> dict:
    return _pipeline("gpipe")


def pipeline_1f1b() -> dict:
    return _pipeline("1f1b")


# -- mixture of experts, expert parallel ------------------------------------------------------


class Experts(nn.Module):
    """This rank's experts as one grouped matmul over tokens sorted by expert."""

    def __init__(self, experts: int, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(experts, dim, hidden) / dim**0.5)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, dim) / hidden**0.5)

    def forward(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.silu(torch._grouped_mm(x, self.w1, offs=offsets))
        return torch._grouped_mm(h, self.w2, offs=offsets)


def moe() -> dict:
    """Top-1 routing to 4 experts, 2 per rank: tokens travel to their expert's rank and back by
    ``all_to_all_single`` with uneven splits, and each rank's experts run as ``_grouped_mm``."""
    world, rank = dist.get_world_size(), dist.get_rank()
    experts, local, dim = 4, 2, 16
    torch.manual_seed(0)
    router = nn.Linear(dim, experts, bias=False).to(DEVICE)
    torch.manual_seed(1 + rank)  # each rank's own experts
    mine = Experts(local, dim, 32).to(DEVICE)
    opt = torch.optim.SGD([*router.parameters(), *mine.parameters()], lr=0.1)
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        x, _ = batch(step, rows=12)
        scores = router(x).softmax(-1)
        weight, expert = scores.max(-1)
        order = expert.argsort(stable=True)
        counts = torch.bincount(expert, minlength=experts)  # tokens per expert, from this rank
        send_splits = counts.view(world, local).sum(1).tolist()
        # how many tokens each rank sends to each of my experts
        theirs = torch.empty(world * local, dtype=counts.dtype, device=counts.device)
        dist.all_to_all_single(theirs, counts.contiguous())
        per_source = theirs.view(world, local)
        recv_splits = per_source.sum(1).tolist()
        routed = x[order]
        received = _all_to_all(routed, recv_splits, send_splits)
        # received rows come grouped by source rank, then expert: regroup by expert
        expert_of_row = torch.cat(
            [
                torch.arange(local, device=DEVICE).repeat_interleave(per_source[src])
                for src in range(world)
            ]
        )
        by_expert = expert_of_row.argsort(stable=True)
        offsets = per_source.sum(0).cumsum(0).to(torch.int32)
        out = torch.empty_like(received)
        out[by_expert] = mine(received[by_expert], offsets)
        back = _all_to_all(out, send_splits, recv_splits)
        combined = torch.empty_like(back)
        combined[order] = back
        loss = (combined * weight.unsqueeze(-1)).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "params": full_params(mine)}


def _all_to_all(inp: torch.Tensor, out_splits: list[int], in_splits: list[int]) -> torch.Tensor:
    """The differentiable all_to_all TorchTitan's expert parallelism uses (its backward sends
    the gradients back the same way)."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd

    return all_to_all_single_autograd(inp.contiguous(), out_splits, in_splits, dist.group.WORLD)


CASES = {
    f.__name__: f
    for f in (
        ddp,
        ddp_compiled,
        ddp_fp16_hook,
        fsdp2,
        fsdp2_no_reshard,
        fsdp2_bf16,
        fsdp2_compiled,
        fsdp2_checkpointed,
        checkpoint_rng,
        dcp_resume,
        pipeline_gpipe,
        pipeline_1f1b,
        moe,
    )
}


def main() -> None:
    out_dir, *names = sys.argv[1:]
    dist.init_process_group(timeout=timedelta(seconds=60))
    results: dict = {"device": DEVICE.type}
    for name in names:
        start = time.perf_counter()
        try:
            results[name] = {**CASES[name](), "seconds": time.perf_counter() - start}
        except Exception:  # noqa: BLE001 - reported per case
            results[name] = {"error": traceback.format_exc()}
    Path(out_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
