"""The cpu runtime's communicator: kernel collectives run through torch.distributed.

nkipy moves no bytes between processes itself. The user initialises torch.distributed (gloo
for CPU tensors, e.g. under ``torchrun``); a kernel's collective then calls the matching
torch.distributed collective on the default process group, or on a subgroup made once per
replica-group set with ``new_group``. The generated ``kernel.py`` never imports torch: the cpu
runtime hands this object to ``codegen.load``, which installs it as the kernel's
``_COMMUNICATOR`` (see ``numpy_support._collective``).

Only what gloo implements for CPU tensors is used (all_reduce, all_gather, broadcast), so
``reduce_scatter`` is an all_reduce whose block this rank keeps, and ``all_to_all`` an all_gather
from which this rank takes its blocks: more traffic, but the results are exactly the primitives'.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from nkipy_core.errors import CollectiveError
from nkipy_core.ir.types import numpy_to_torch, torch_to_numpy

_REDUCE_OPS = {"sum": "SUM", "prod": "PRODUCT", "max": "MAX", "min": "MIN"}


class TorchDistributedCommunicator:
    """Runs ``(kind, x, groups, **params)`` for this process's rank; owns the subgroups it made."""

    def __init__(self) -> None:
        self._subgroups: dict[tuple, list[Any]] = {}

    def __call__(self, kind: str, x: np.ndarray, groups: tuple, **params: Any) -> np.ndarray:
        if len(groups[0]) == 1:
            return np.asarray(x)  # every collective over one rank is the identity
        group, members = self._group_of_this_rank(kind, groups)
        t = numpy_to_torch(np.array(x, copy=True))  # collectives write in place; x may be an input
        try:
            result = getattr(self, f"_{kind}")(t, group, members, **params)
        except RuntimeError as exc:  # gloo's errors (lost peers, timeouts) are RuntimeErrors
            raise _failed(kind, members, exc) from exc
        return torch_to_numpy(result)

    def _group_of_this_rank(self, kind: str, groups: tuple) -> tuple[Any, tuple[int, ...]]:
        """The process group running ``groups`` and the ranks of this rank's group, in order.

        Every rank runs the same kernel, so every rank calls ``new_group`` for the same groups in
        the same order, as torch requires (even ranks outside a group must call it)."""
        if not (dist.is_available() and dist.is_initialized()):
            raise CollectiveError(
                f"{kind} over groups {groups} needs torch.distributed: call "
                "torch.distributed.init_process_group('gloo') in every rank (torchrun sets the environment)"
            )
        world, rank = dist.get_world_size(), dist.get_rank()
        if sum(len(g) for g in groups) != world:
            raise CollectiveError(
                f"{kind}: groups {groups} cover {sum(len(g) for g in groups)} ranks but the default process "
                f"group has {world}; compile the kernel for this world size"
            )
        if len(groups) == 1:
            return dist.group.WORLD, groups[0]
        if groups not in self._subgroups:
            self._subgroups[groups] = [dist.new_group(list(g)) for g in groups]
        index = next(i for i, g in enumerate(groups) if rank in g)
        return self._subgroups[groups][index], groups[index]

    def _gathered(
        self, t: torch.Tensor, group: Any, members: tuple[int, ...]
    ) -> list[torch.Tensor]:
        """Every member's tensor, in the order ``members`` lists them. torch orders a group's
        ranks ascending, which a replica group need not."""
        parts = [torch.empty_like(t) for _ in members]
        dist.all_gather(parts, t, group=group)
        ascending = sorted(members)
        return [parts[ascending.index(r)] for r in members]

    def _reduced(self, t: torch.Tensor, group: Any, op: str) -> torch.Tensor:
        dist.all_reduce(t, op=getattr(dist.ReduceOp, _REDUCE_OPS[op]), group=group)
        return t

    def _all_reduce(
        self, t: torch.Tensor, group: Any, members: tuple[int, ...], *, op: str
    ) -> torch.Tensor:
        return self._reduced(t, group, op)

    def _all_gather(
        self, t: torch.Tensor, group: Any, members: tuple[int, ...], *, axis: int
    ) -> torch.Tensor:
        return torch.cat(self._gathered(t, group, members), dim=axis)

    def _reduce_scatter(
        self, t: torch.Tensor, group: Any, members: tuple[int, ...], *, op: str, axis: int
    ) -> torch.Tensor:
        blocks = self._reduced(t, group, op).chunk(len(members), dim=axis)
        return blocks[members.index(dist.get_rank())]

    def _all_to_all(
        self,
        t: torch.Tensor,
        group: Any,
        members: tuple[int, ...],
        *,
        split_axis: int,
        concat_axis: int,
    ) -> torch.Tensor:
        mine = members.index(dist.get_rank())
        blocks = [
            part.chunk(len(members), dim=split_axis)[mine]
            for part in self._gathered(t, group, members)
        ]
        return torch.cat(blocks, dim=concat_axis)

    def _collective_broadcast(
        self, t: torch.Tensor, group: Any, members: tuple[int, ...], *, source: int
    ) -> torch.Tensor:
        dist.broadcast(t, src=members[source], group=group)
        return t


def _failed(kind: str, members: tuple[int, ...], exc: RuntimeError) -> CollectiveError:
    """A kernel's collective that the process group's backend (gloo) gave up on: a peer's
    connection was lost or it did not come within the group's timeout. The ``nkipy`` group
    raises ``CollectiveError`` itself; other backends raise ``RuntimeError``, translated here so
    that a kernel's caller catches one type whatever the group."""
    rank = dist.get_rank()
    peers = [r for r in members if r != rank]
    return CollectiveError(
        f"{kind} inside a kernel failed on rank {rank} while waiting for ranks {peers}: {exc}. "
        "If a rank exited or was killed (its log says why), the process group cannot run "
        "collectives any more: end this process and restart the job. If a rank did not reach "
        "this collective within the process group's timeout (`init_process_group(timeout=...)`), "
        "check that every rank runs the same kernels in the same order."
    )
