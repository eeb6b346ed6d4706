"""The ops a graph leaves on CPU: found from its plan, reported once per op as a
``FallbackWarning`` (strict: one error), and kept on the compiled graph so a process that rebuilds
it from torch's AOTAutograd cache reports them again.
"""

from __future__ import annotations

import logging
import operator
import warnings
from typing import Any

import torch
import torch.fx

from nkipy_core import _torch
from nkipy_core.cache.kernel_cache import STATS
from nkipy_core.compiler import regions
from nkipy_core.errors import UnsupportedOpsError
from nkipy_core.plugin.registry import op_name

log = logging.getLogger("nkipy.compiler")


class FallbackWarning(UserWarning):
    """An op runs as torch on CPU because no installed pack lowers it."""


#: ``GraphModule.meta`` key of a graph ``compile_graph`` returned: what ``find_fallbacks`` found,
#: which a process rebuilding the graph from torch's AOTAutograd cache reports again
FALLBACKS = "nkipy_fallbacks"


#: ops that only check a kernel's results on the host and raise torch's error (the ``info`` of
#: ``linalg.cholesky``/``inv``/``solve``/``lu_factor``); they compute nothing, so leaving them on
#: CPU is no fallback. AOTAutograd wraps them in ``with_effects`` (they are effectful).
_HOST_CHECKS = (torch.ops.aten._linalg_check_errors.default,)


def _host_check(node: torch.fx.Node) -> bool:
    return (
        node.target is torch.ops.higher_order.with_effects
        and len(node.args) > 1
        and node.args[1] in _HOST_CHECKS
    )


def find_fallbacks(gm: torch.fx.GraphModule, decisions: dict[str, Any]) -> dict[str, str]:
    """Op name -> why it runs on CPU, for each op left on CPU (glue ops and ``getitem`` excepted)."""
    fallbacks: dict[str, str] = {}
    for node in gm.graph.nodes:
        decision = decisions.get(node.name)
        if isinstance(decision, str):
            fallbacks.setdefault(op_name(node.target), decision)
        elif node.op == "call_function" and not isinstance(node.target, _torch.OpOverload):
            if node.target not in (operator.getitem, regions.run_on_cpu) and not _host_check(node):
                fallbacks.setdefault(
                    getattr(node.target, "__name__", str(node.target)), "not an ATen op"
                )
    return fallbacks


def report_fallbacks(fallbacks: dict[str, str], strict: bool) -> None:
    """One warning per op left on CPU (``find_fallbacks``); strict: one error. A graph rebuilt from
    torch's AOTAutograd cache (``nkipy_core.dynamo.stored_graph``) reports its fallbacks here too."""
    if not fallbacks:
        return
    if strict:
        raise UnsupportedOpsError(f"{op} ({why})" for op, why in fallbacks.items())
    for op, why in fallbacks.items():
        STATS["fallback_ops"] += 1
        log.info("fallback: %s runs on CPU: %s", op, why)
        warnings.warn(f"nkipy: {op} runs on CPU: {why}", FallbackWarning, stacklevel=2)
