"""HLO text as instructions: what the Neuron profile check reads.

The check reads the module exactly as ``neuronx-cc`` will get it (after jaxlib's StableHLO -> HLO
conversion, which expands CHLO ops and tuples), from the HLO text that every kernel cache entry
holds (``hlo.txt``, printed with metadata and large constants). HLO's text form is XLA's stable,
documented way to read a module; each instruction is one line::

    %name = f32[3]{0} reduce(%a, %b), dimensions={1}, to_apply=%region_0.1, metadata={op_name="..."}

and each computation (the entry, a reduction's combiner, a sort's comparator) is a block headed by
its name. Only what the rules ask for is parsed: opcode, element types, operands, the called
computations, a few attributes and the ``op_name`` metadata that names the ATen op and lowering rule
an instruction came from.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import attrs

from nkipy_core.errors import NkipyError

#: ``%name = TYPE opcode(`` at the start of an instruction line (``ROOT`` marks a result)
_INSTRUCTION = re.compile(
    r"^\s*(?P<root>ROOT )?%?(?P<name>[\w.\-]+) = (?P<type>\([^=]*?\)|\S+) (?P<opcode>[a-z][\w\-]*)\("
)
#: ``%region_0.1 (...) -> f32[] {`` or ``ENTRY %main.2 ... {``
_COMPUTATION = re.compile(r"^(?P<entry>ENTRY )?%?(?P<name>[\w.\-]+) .*\{\s*$")
_COMMENT = re.compile(r"/\*.*?\*/")
_ELEMENT = re.compile(r"\b([a-z][a-z0-9]*)\[")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_CALLS = re.compile(
    r"\b(?:to_apply|calls|body|condition)=%?([\w.\-]+)|\bbranch_computations=\{([^}]*)\}"
)


@attrs.frozen
class Instruction:
    """One HLO instruction: its result element type(s), operands and attributes text."""

    name: str
    opcode: str
    #: element types of the result, in order (several for a tuple: a variadic reduce or sort)
    types: tuple[str, ...]
    #: the result type as written (``f32[3]{0}``, ``(f32[3]{0}, s32[3]{0})``)
    type_text: str
    operands: tuple[str, ...]
    #: the text after the operand list: attributes, called computations, metadata
    attributes: str
    #: the literal of a ``constant`` (its text between the parentheses), else ""
    literal: str
    computation: str
    root: bool

    @property
    def origin(self) -> str:
        """The ATen op and rule that built it (the ``op_name`` metadata), or ""."""
        found = _OP_NAME.search(self.attributes)
        return found.group(1) if found else ""

    def called(self) -> tuple[str, ...]:
        """Names of the computations it calls (a combiner, a comparator, a loop body)."""
        names: list[str] = []
        for single, branches in _CALLS.findall(self.attributes):
            names += [single] if single else [n.strip().lstrip("%") for n in branches.split(",")]
        return tuple(names)

    def attribute(self, key: str) -> str | None:
        """The raw text of attribute ``key`` (``dimensions={1}`` -> ``{1}``), or ``None``."""
        found = re.search(rf"\b{re.escape(key)}=(\{{[^}}]*\}}|[^,\s]+)", self.attributes)
        return found.group(1) if found else None


@attrs.frozen
class Module:
    """The computations of one HLO module, by name; ``entry`` is the main one."""

    computations: dict[str, list[Instruction]]
    entry: str

    def instructions(self) -> Iterator[Instruction]:
        for body in self.computations.values():
            yield from body

    def types_of(self) -> dict[str, tuple[str, ...]]:
        """Instruction name -> its element types, for reading operand types."""
        return {i.name: i.types for i in self.instructions()}


def _split_operands(text: str) -> tuple[str, tuple[str, ...], str]:
    """The operand list (up to the matching parenthesis) and what follows it."""
    depth = 1
    for i, ch in enumerate(text):
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
            if depth == 0:
                inner, rest = text[:i], text[i + 1 :]
                return inner, _names(inner), rest
    return text, _names(text), ""


def _names(inner: str) -> tuple[str, ...]:
    """Operand names of an operand list (``%a, %b`` or ``f32[] %a, ...``)."""
    return tuple(m.lstrip("%") for m in re.findall(r"%?[A-Za-z_][\w.\-]*(?=\s*(?:,|$))", inner))


class HloTextError(NkipyError):
    """A line of HLO text that is neither an instruction nor a computation's frame: the check
    would otherwise pass over what it cannot read."""


def parse(text: str) -> Module:
    """Read HLO text (one module) into its computations and instructions."""
    computations: dict[str, list[Instruction]] = {}
    entry = ""
    current = ""
    for line in text.splitlines():
        line = _COMMENT.sub("", line)  # XLA numbers long tuples: (..., /*index=5*/f32[4]{0})
        instruction = _INSTRUCTION.match(line)
        if instruction is None:
            if not line.strip() or line.strip() == "}" or line.startswith("HloModule"):
                continue
            header = _COMPUTATION.match(line)
            if header is None:
                raise HloTextError(f"cannot read this line of HLO text: {line.strip()!r}")
            current = header.group("name")
            computations[current] = []
            if header.group("entry"):
                entry = current
            continue
        inner, operands, rest = _split_operands(line[instruction.end() :])
        opcode = instruction.group("opcode")
        computations.setdefault(current, []).append(
            Instruction(
                name=instruction.group("name"),
                opcode=opcode,
                types=tuple(_ELEMENT.findall(instruction.group("type"))),
                type_text=instruction.group("type"),
                operands=() if opcode == "constant" else operands,
                attributes=rest,
                literal=inner if opcode == "constant" else "",
                computation=current,
                root=bool(instruction.group("root")),
            )
        )
    return Module(computations, entry)
