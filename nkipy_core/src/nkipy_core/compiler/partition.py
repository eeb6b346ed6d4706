"""Partitioning: the planned nodes marked with their rules, and each maximal run of them fused
into a subgraph (torch's ``CapabilityBasedPartitioner``) that becomes one kernel; with
``blocks``, cut where a repeated layer starts or ends (``compiler.blocks``), each piece
given canonical names so identical layers have identical code.
"""

from __future__ import annotations

import operator

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
from torch.fx.passes.operator_support import OperatorSupportBase

from nkipy_core.compiler import blocks
from nkipy_core.compiler.plan import RULE
from nkipy_core.plugin.registry import LoweringRule


class _Support(OperatorSupportBase):
    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node.target is operator.getitem:  # a result of a lowered multi-output op
            produced = node.args[0]
            return isinstance(produced, torch.fx.Node) and RULE in produced.meta
        return RULE in node.meta


def partition(
    gm: torch.fx.GraphModule, decisions: dict[str, LoweringRule | str], by_blocks: bool = False
) -> tuple[torch.fx.GraphModule, list[tuple[str, torch.fx.GraphModule]]]:
    """``gm`` with each maximal supported subgraph fused into a submodule, and those submodules
    (name, subgraph) in graph order; each of their nodes holds its rule in ``node.meta[RULE]``.
    ``by_blocks``: each repeated layer a submodule of its own, with canonical names."""
    for node in gm.graph.nodes:
        if isinstance(decisions.get(node.name), LoweringRule):
            node.meta[RULE] = decisions[node.name]
    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    proposed = partitioner.propose_partitions()
    labels = blocks.block_labels(gm.graph) if by_blocks else {}
    if labels:
        order = {node: i for i, node in enumerate(gm.graph.nodes)}
        runs = blocks.split((p.nodes for p in proposed), labels, order)
        proposed = [Partition(id=i, nodes=run) for i, run in enumerate(runs)]
    fused = partitioner.fuse_partitions(proposed, prefix="nkipy_kernel_")
    subs = []
    for node in fused.graph.nodes:
        if node.op == "call_module" and node.target.startswith("nkipy_kernel_"):
            sub = getattr(fused, node.target)
            if labels:
                sub = blocks.canonical(sub)
                setattr(fused, node.target, sub)
            subs.append((node.target, sub))
    return fused, subs
