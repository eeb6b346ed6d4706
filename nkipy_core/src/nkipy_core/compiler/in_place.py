"""Graph inputs updated by their kernel: the ``copy_`` of a kernel's output back into a graph
input, taken into the kernel call.

A graph that updates its inputs (an optimizer step's parameters and states, batch norm's running
statistics) reaches nkipy as a functional graph whose kernel computes the new values, followed by
``copy_(input, new_value)`` for each updated input. Run that way, each new value is a new array,
written once by the kernel and copied once more into the input: for AdamW over 2.5 M parameters,
three arrays of 10 MB made and copied per step. When the kernel is the last to read the input,
the call can leave the new value in the input's own memory instead (``KernelCall``'s
``Boundary.writes``): the ``cpu`` runtime's kernel then writes it there directly, and a runtime
without that ability copies it there at the end of the call, which is what the ``copy_`` did.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from nkipy_core.compiler.kernel_call import KernelCall


def write_inputs_in_kernels(gm: torch.fx.GraphModule) -> None:
    """Take each ``copy_(input, kernel_output)`` of ``gm`` into the kernel call that computes the
    output, where that is sound: the input is a graph input that the call takes once, as it is
    (no math bit, no layout change), and that nothing but the call and the ``copy_`` reads; the
    output is read by the ``copy_`` alone and has the input's shape and dtype (a ``copy_`` that
    broadcasts or converts stays)."""
    writes: dict[torch.fx.Node, list[tuple[int, int]]] = {}
    for copy in list(gm.graph.find_nodes(op="call_function", target=torch.ops.aten.copy_.default)):
        found = _kernel_write(gm, copy)
        if found is None:
            continue
        call_node, output, position = found
        writes.setdefault(call_node, []).append((output, position))
        value = copy.args[1]
        copy.replace_all_uses_with(copy.args[0])
        gm.graph.erase_node(copy)
        if value is not call_node:
            gm.graph.erase_node(value)
    for call_node, pairs in writes.items():
        name = str(call_node.target)
        setattr(gm, name, getattr(gm, name).writing(tuple(sorted(pairs))))


def _kernel_write(
    gm: torch.fx.GraphModule, copy: torch.fx.Node
) -> tuple[torch.fx.Node, int, int] | None:
    """(the kernel call's node, its output, its input position) that ``copy`` may be taken into,
    or ``None``."""
    if len(copy.args) != 2 or copy.kwargs:  # non_blocking given: leave it to torch
        return None
    target, value = copy.args
    if not isinstance(target, torch.fx.Node) or target.op != "placeholder":
        return None
    if not isinstance(value, torch.fx.Node) or set(value.users) != {copy}:
        return None
    if value.op == "call_function" and value.target is operator.getitem:
        call_node, output = value.args
    else:
        call_node, output = value, 0
    if not isinstance(call_node, torch.fx.Node) or call_node.op != "call_module":
        return None
    call = getattr(gm, str(call_node.target), None)
    if not isinstance(call, KernelCall) or call_node.kwargs:
        return None
    if not call.tuple_output and value is not call_node:
        return None
    positions = [i for i, a in enumerate(call_node.args) if a is target]
    if len(positions) != 1 or set(target.users) != {call_node, copy}:
        return None
    (position,) = positions
    boundary = call.boundary
    signature = call.executable.signature
    if (
        not isinstance(output, int)
        or signature.outputs[output] != signature.inputs[position]
        or any(j == position for _, j in boundary.writes)
        or position in boundary.resolved_inputs
        or (boundary.input_orders and boundary.input_orders[position] is not None)
        or call.inverse_orders[output] is not None
        or call.complex_outputs[output]
        or boundary.complex_inputs
    ):
        return None
    return call_node, output, position
