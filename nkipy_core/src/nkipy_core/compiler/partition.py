"""Partitioning: the planned nodes marked with their rules, and each maximal run of them fused
into a subgraph (torch's ``CapabilityBasedPartitioner``) that becomes one kernel.
"""

from __future__ import annotations

import operator

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from nkipy_core.compiler.plan import RULE
from nkipy_core.plugin.registry import LoweringRule


class _Support(OperatorSupportBase):
    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node.target is operator.getitem:  # a result of a lowered multi-output op
            produced = node.args[0]
            return isinstance(produced, torch.fx.Node) and RULE in produced.meta
        return RULE in node.meta


def partition(
    gm: torch.fx.GraphModule, decisions: dict[str, LoweringRule | str]
) -> tuple[torch.fx.GraphModule, list[tuple[str, torch.fx.GraphModule]]]:
    """``gm`` with each maximal supported subgraph fused into a submodule, and those submodules
    (name, subgraph) in graph order; each of their nodes holds its rule in ``node.meta[RULE]``."""
    for node in gm.graph.nodes:
        if isinstance(decisions.get(node.name), LoweringRule):
            node.meta[RULE] = decisions[node.name]
    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions(), prefix="nkipy_kernel_")
    subs = [
        (node.target, getattr(fused, node.target))
        for node in fused.graph.nodes
        if node.op == "call_module" and node.target.startswith("nkipy_kernel_")
    ]
    return fused, subs
