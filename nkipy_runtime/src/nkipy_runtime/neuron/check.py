"""The check before the compiler: every instruction of a module against a ``NeuronProfile``.

``violations`` reads the HLO text a kernel's cache entry holds and returns each instruction that
breaks a documented rule, with the ATen op and lowering rule it came from (its ``op_name``
metadata, or that of the reduce, sort or scatter whose combiner it is). ``NrtRuntime.compile``
refuses such a module with ``NeuronProfileError`` before ``neuronx-cc`` starts; the planner asks
the same question of each op's trial kernel, so an op the target cannot take runs as torch on
CPU with a fallback warning instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import attrs

from nkipy_core.errors import NkipyError

from .hlo_text import Instruction, Module, parse
from .profile import (
    CUSTOM_CALL_TARGETS,
    DOCUMENTED_OPCODES,
    RULES,
    TABLE_OPCODES,
    UNCONFIRMED_OPCODES,
    NeuronProfile,
    Rule,
)

ACCEPTED_OPCODES = TABLE_OPCODES | DOCUMENTED_OPCODES | UNCONFIRMED_OPCODES
_INTEGERS = frozenset({"s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"})
_COMBINERS = frozenset({"add", "multiply", "maximum", "minimum"})
_SORT_DIRECTIONS = frozenset({"LT", "LE", "GT", "GE"})
_INT32 = (-(2**31), 2**31 - 1)


@attrs.frozen
class Violation:
    """One instruction that breaks one rule of a profile."""

    rule: Rule
    opcode: str
    dtype: str
    #: the ATen op and lowering rule it came from ("" for glue between ops)
    origin: str
    detail: str
    instruction: str

    def __str__(self) -> str:
        where = f" (from {self.origin})" if self.origin else ""
        return f"{self.opcode} on {self.dtype}{where}: {self.detail} [{self.rule.name}]"


class NeuronProfileError(NkipyError):
    """A kernel's HLO breaks rules of the Neuron target it is compiled for; ``neuronx-cc`` would
    reject it (or compute it wrongly), so it is not started."""

    def __init__(self, kernel: str, profile: NeuronProfile, found: list[Violation]):
        self.violations = found
        rules = {v.rule.name: v.rule for v in found}
        lines = [f"  {v}" for v in found[:20]]
        if len(found) > 20:
            lines.append(f"  ... and {len(found) - 20} more")
        lines += [
            f"  [{r.name}] neuronx-cc requires {r.requires} ({r.source})" for r in rules.values()
        ]
        super().__init__(
            f"kernel {kernel} breaks {len(found)} rule(s) of the Neuron {profile.name} profile, so "
            "neuronx-cc was not run:\n"
            + "\n".join(lines)
            + "\nThe planner keeps such ops on CPU, so "
            "this is a bug in the lowering named above (or in nkipy): please report it with the "
            "kernel's hlo.txt; NKIPY_RUNTIME=cpu runs the program meanwhile."
        )


class _Reader:
    """A parsed module with what the rules ask about it: operand types, who calls a computation."""

    def __init__(self, module: Module, profile: NeuronProfile):
        self.module = module
        self.profile = profile
        self.types = module.types_of()
        self.by_name = {i.name: i for i in module.instructions()}
        self.callers: dict[str, Instruction] = {}
        for instruction in module.instructions():
            for called in instruction.called():
                self.callers.setdefault(called, instruction)

    def operand_types(self, instruction: Instruction) -> list[str]:
        return [t for name in instruction.operands for t in self.types.get(name, ())]

    def body(self, computation: str) -> list[Instruction]:
        """The computation's instructions other than its parameters."""
        return [i for i in self.module.computations.get(computation, []) if i.opcode != "parameter"]

    def origin(self, instruction: Instruction) -> str:
        seen = set()
        while not instruction.origin and instruction.computation in self.callers:
            if instruction.computation in seen:
                break
            seen.add(instruction.computation)
            instruction = self.callers[instruction.computation]
        return instruction.origin

    def is_constant(self, name: str) -> bool:
        found = self.by_name.get(name)
        return found is not None and found.opcode == "constant"


Check = Callable[[Instruction, _Reader], Iterator[tuple[str, str]]]
_CHECKS: list[Check] = []


def _check(fn: Check) -> Check:
    _CHECKS.append(fn)
    return fn


@_check
def _opcode(i: Instruction, r: _Reader) -> Iterator[tuple[str, str]]:
    if i.opcode in ("while", "conditional"):
        yield "control-flow", f"a {i.opcode}"
    elif i.opcode not in ACCEPTED_OPCODES:
        yield "opcode", f"{i.opcode} is not an operator Neuron documents"


@_check
def _types(i: Instruction, r: _Reader) -> Iterator[tuple[str, str]]:
    refused = sorted(set(i.types) & r.profile.refused_types())
    if refused:
        yield "element-type", f"{', '.join(refused)} on {r.profile.target}"
    if "u64" in i.types and not r.profile.native_int64 and i.opcode != "constant":
        yield "u64-value", f"u64 values on {r.profile.target} in 32 bits"
    if "<=" in i.type_text or "?" in i.type_text:
        yield "static-shape", f"dynamic shape {i.type_text}"


def _combiner(r: _Reader, i: Instruction) -> str:
    """Why the computation ``i`` reduces with is not one add/multiply/maximum/minimum ("" if
    it is)."""
    called = i.called()
    body = r.body(called[0]) if called else []
    ops = [b.opcode for b in body]
    if len(body) == 1 and ops[0] in _COMBINERS:
        return ""
    return f"combiner {' + '.join(ops) or 'missing'}"


@_check
def _reductions(i: Instruction, r: _Reader) -> Iterator[tuple[str, str]]:
    if i.opcode not in ("reduce", "reduce-window", "all-reduce", "reduce-scatter"):
        return
    if i.opcode in ("reduce", "reduce-window"):
        if len(i.types) > 1:
            yield "reduce", f"a variadic {i.opcode} of {len(i.types)} results"
        inits = i.operands[len(i.operands) // 2 :]
        if not all(r.is_constant(name) for name in inits):
            yield "reduce", "an init value that is not a constant"
    why = _combiner(r, i)
    if why:
        yield "reduce", why
    if i.opcode in ("all-reduce", "reduce-scatter") and set(i.types) & _INTEGERS:
        yield "integer-collective", f"an {i.opcode} of integers"


@_check
def _sort(i: Instruction, r: _Reader) -> Iterator[tuple[str, str]]:
    if i.opcode != "sort":
        return
    body = r.body(i.called()[0]) if i.called() else []
    if not (
        len(body) == 1
        and body[0].opcode == "compare"
        and body[0].attribute("direction") in _SORT_DIRECTIONS
    ):
        ops = ", ".join(
            f"{b.opcode} {b.attribute('direction')}" if b.opcode == "compare" else b.opcode
            for b in body
        )
        yield "sort-comparator", f"comparator of {ops or 'nothing'}"


@_check
def _custom_call(i: Instruction, r: _Reader) -> Iterator[tuple[str, str]]:
    if i.opcode != "custom-call":
        return
    found = re.search(r'custom_call_target="([^"]*)"', i.attributes)
    target = found.group(1) if found else ""
    if target not in CUSTOM_CALL_TARGETS:
        yield "custom-call", f"target {target!r}"


@_check
def _constants(i: Instruction, r: _Reader) -> Iterator[tuple[str, str]]:
    if i.opcode != "constant" or i.types[0] not in ("u64", "s64"):
        return
    values = [int(v) for v in re.findall(r"-?\d+", i.literal)]
    if i.types[0] == "u64" and any(v > 2**32 - 1 for v in values):
        yield "u64-constant", f"value {max(values)}"
    if i.types[0] == "s64" and not r.profile.native_int64:
        outside = [v for v in values if not _INT32[0] <= v <= _INT32[1]]
        if outside:
            yield "int64-constant", f"value {outside[0]} outside int32"


def _is_integer(types: list[str] | tuple[str, ...]) -> bool:
    return bool(set(types) & _INTEGERS)


@_check
def _integer_ops(i: Instruction, r: _Reader) -> Iterator[tuple[str, str]]:
    if i.opcode in ("dot", "convolution") and _is_integer(r.operand_types(i)):
        yield "integer-dot", f"{i.opcode} of {'/'.join(sorted(set(r.operand_types(i))))}"
    elif i.opcode == "power" and "s64" in i.types:
        yield "s64-power", "s64 exponentiation"
    elif i.opcode == "shift-right-arithmetic" and i.types[0] not in ("s32", "u32"):
        yield "shift-right-arithmetic", f"a {i.types[0]} operand"
    elif i.opcode == "topk" and _is_integer(r.operand_types(i)):
        yield "integer-topk", "integer input"
    elif i.opcode == "scatter" and (_is_integer(i.types) or "pred" in i.types):
        body = r.body(i.called()[0]) if i.called() else []
        if body:  # a plain overwrite returns the update parameter: no instruction of its own
            yield "integer-scatter", f"scatter combining {body[-1].opcode}"


@_check
def _indexing(i: Instruction, r: _Reader) -> Iterator[tuple[str, str]]:
    if i.opcode == "dynamic-update-slice" and not all(r.is_constant(n) for n in i.operands[2:]):
        yield "dynamic-update-slice", "start indices that are not constants"
    elif i.opcode == "gather":
        dims = re.findall(r"\d+", i.attribute("start_index_map") or "")
        if len(set(dims)) != len(dims):
            yield "gather", f"start_index_map {{{','.join(dims)}}}"
    elif i.opcode == "rng-bit-generator":
        algorithm = i.attribute("algorithm")
        if algorithm not in (None, "rng_default"):
            yield "rng-algorithm", f"algorithm {algorithm}"


def violations(hlo_text: str, profile: NeuronProfile) -> list[Violation]:
    """Every rule of ``profile`` that an instruction of the module breaks, in module order."""
    reader = _Reader(parse(hlo_text), profile)
    found = []
    for instruction in reader.module.instructions():
        for check in _CHECKS:
            for rule, detail in check(instruction, reader):
                found.append(
                    Violation(
                        RULES[rule],
                        instruction.opcode,
                        "/".join(instruction.types),
                        reader.origin(instruction),
                        detail,
                        instruction.name,
                    )
                )
    return found
