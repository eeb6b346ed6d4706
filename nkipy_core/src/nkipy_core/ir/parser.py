"""Reading IR text back into a kernel, strictly: the cpu runtime's executables are made from
this data, never from code found in a kernel cache.

The grammar is exactly what ``printer.format_kernel`` prints: a header with typed parameters, one
op per line (``%v2: f32[4] = add(%v0, %v1) {k=v, ...}``, optionally ``  # origin``), ``return``
and ``}``. Only registered primitives, operands defined on an earlier line, and attribute values
built from a closed set of literals are accepted (ints, floats including ``inf`` and ``nan``,
quoted strings, ``True``/``False``/``None``, dtype names and tuples of these); nothing is
evaluated. What the text shows only by digest or rounded (constants, ``Opaque`` strings) comes
from ``data`` (``printer.kernel_data``). Then the kernel is verified, and printing it must give
the text back character for character, so nothing outside the grammar can pass.

A custom call's ``host`` must name a host function its module declares (``NKIPY_HOST_FUNCTIONS``)
in a module this process has already imported: parsing never imports anything.
"""

from __future__ import annotations

import ast
import base64
import binascii
import re
import sys
from collections.abc import Mapping
from typing import Any, NoReturn

from nkipy_core.errors import IRParseError, VerificationError
from nkipy_core.ir.graph import ConstantData, Kernel, Op, Opaque, Value
from nkipy_core.ir.numpy_support import HOST_FUNCTIONS
from nkipy_core.ir.primitives import PRIMITIVES, infer
from nkipy_core.ir.printer import data_key, format_kernel
from nkipy_core.ir.types import DType, TensorType
from nkipy_core.ir.verify import verify

_DTYPES = {d.value: d for d in DType}
_TYPE = rf"(?:{'|'.join(_DTYPES)})\[(?:\d+(?:x\d+)*)?\]"
#: kernel names are identifiers with ``.``, ``:`` and ``-``: the name lands in generated code
_HEADER = re.compile(r"kernel ([A-Za-z_][\w.:\-]*)\((.*)\) \{")
_PARAM = re.compile(rf"%v(\d+): ({_TYPE})")
_OP = re.compile(rf"  %v(\d+): ({_TYPE}) = (\w+)\(((?:%v\d+(?:, %v\d+)*)?)\)")
_RETURN = re.compile(r"  return ((?:%v\d+(?:, %v\d+)*)?)")
_ORIGIN = re.compile(r"  # (.+)")
#: a constant's value as printed (array digits or a digest): checked by printing, not read
_CONSTANT = re.compile(r" \{value=([^{}]+)\}")
_ATTRIBUTE_NAME = re.compile(r"([a-z_]+)=")
#: the tokens of an attribute value; floats as ``repr`` spells them, before ints
_TOKEN = re.compile(
    r"""(?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      | (?P<float>-?(?:\d+\.\d*(?:e[+-]\d+)?|\d+e[+-]\d+|inf|nan))(?![\w.])
      | (?P<int>-?\d+)(?![\w.])
      | (?P<name>[A-Za-z_]\w*)
      | (?P<opaque><\d+\ chars\ sha256:[0-9a-f]{16}>)""",
    re.VERBOSE,
)
_NAMES: dict[str, Any] = {"True": True, "False": False, "None": None, **_DTYPES}


def parse_kernel(text: str, data: Mapping[str, str] | None = None) -> Kernel:
    """The kernel that ``format_kernel`` printed as ``text`` (with or without origins), with the
    constants and opaque strings of ``printer.kernel_data`` in ``data``. ``IRParseError``
    naming the line for anything else."""
    return _Parser(text, dict(data or {})).kernel()


class _Parser:
    """One text's parse: the types of the values defined so far, the data not yet used."""

    def __init__(self, text: str, data: dict[str, str]):
        self.text = text
        self.data = data
        self.types: dict[int, TensorType] = {}

    def kernel(self) -> Kernel:
        lines = self.text.split("\n")
        if lines[-1] != "":
            raise IRParseError(len(lines), "expected a newline after the closing `}`")
        lines.pop()
        for number, line in enumerate(lines, 1):
            if not line.isprintable():
                raise IRParseError(number, "expected printable characters only")
        header = _HEADER.fullmatch(lines[0]) if lines else None
        if header is None:
            raise IRParseError(1, "expected `kernel NAME(%v0: TYPE, ...) {`")
        name, params = header.groups()
        params_list = [self.define(1, m) for m in _items(1, params, _PARAM, "`%vN: TYPE`")]
        end = next((n for n, line in enumerate(lines) if line.startswith("  return")), len(lines))
        ops = [self.op(n, line) for n, line in enumerate(lines[1:end], 2)]
        returned = _RETURN.fullmatch(lines[end]) if end < len(lines) else None
        if returned is None:
            raise IRParseError(end + 1, "expected `return %vN, ...`")
        outputs = [self.use(end + 1, v) for v in _names(returned.group(1))]
        if lines[end + 1 :] != ["}"]:
            raise IRParseError(end + 2, "expected `}` as the last line")
        if self.data:
            raise IRParseError(end + 2, f"expected no more data, found {sorted(self.data)}")
        kernel = Kernel(name, params_list, ops, outputs)
        return self.check(kernel)

    def check(self, kernel: Kernel) -> Kernel:
        """Verify ``kernel`` and require that it prints as the text it was read from."""
        try:
            verify(kernel)
        except VerificationError as exc:
            raise IRParseError(1, f"expected a well-typed kernel: {exc}") from None
        printed = format_kernel(kernel)
        if printed != self.text:
            pairs = zip(self.text.split("\n"), printed.split("\n"))
            number, (found, want) = next((n, p) for n, p in enumerate(pairs, 1) if p[0] != p[1])
            raise IRParseError(number, f"expected {want!r} (as nkipy prints it), found {found!r}")
        return kernel

    def define(self, number: int, match: re.Match[str]) -> Value:
        id_, type_text = int(match.group(1)), match.group(2)
        if id_ in self.types:
            raise IRParseError(number, f"%v{id_} is defined twice")
        value = Value(id_, _type(type_text))
        self.types[id_] = value.type
        return value

    def use(self, number: int, id_: int) -> Value:
        if id_ not in self.types:
            raise IRParseError(number, f"expected an operand defined above, found %v{id_}")
        return Value(id_, self.types[id_])

    def op(self, number: int, line: str) -> Op:
        head = _OP.match(line)
        if head is None:
            raise IRParseError(number, "expected an op `%vN: TYPE = primitive(%vA, ...) {k=v}`")
        prim = head.group(3)
        if prim not in PRIMITIVES:
            raise IRParseError(number, f"expected a primitive, found {prim!r}")
        operands = [self.use(number, v) for v in _names(head.group(4))]
        result_id = int(head.group(1))
        rest = line[head.end() :]
        if prim == "constant":
            params, rest = self.constant(number, rest, result_id, _type(head.group(2)))
        else:
            values = _Values(number, rest, self.data, f"v{result_id}")
            params, rest = values.attributes(), values.rest()
        origin = ""
        if rest:
            comment = _ORIGIN.fullmatch(rest)
            if comment is None:
                raise IRParseError(number, f"expected the end of the line, found {rest!r}")
            origin = comment.group(1)
        if prim == "custom_call":
            _check_host(number, params.get("host"))
        result = self.define(number, head)
        try:
            expected = infer(prim, [v.type for v in operands], params)
        except Exception as exc:  # noqa: BLE001 - a value of a wrong type fails a rule any way
            raise IRParseError(number, f"expected a well-typed {prim}: {exc}") from None
        if expected != result.type:
            raise IRParseError(number, f"expected the result type {expected}, found {result.type}")
        return Op(prim, operands, params, result, origin)

    def constant(
        self, number: int, rest: str, result_id: int, type_: TensorType
    ) -> tuple[dict[str, Any], str]:
        """A constant's value, from ``data`` (its printed form is checked when printed)."""
        match = _CONSTANT.match(rest)
        if match is None:
            raise IRParseError(number, "expected ` {value=...}` after `constant()`")
        key = data_key(f"v{result_id}", "value")
        encoded = self.data.pop(key, None)
        if encoded is None:
            raise IRParseError(number, f"expected the constant's bytes in the data, at {key!r}")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, TypeError):
            raise IRParseError(number, f"expected base64 bytes at {key!r}") from None
        if len(raw) != type_.size * type_.dtype.numpy.itemsize:
            raise IRParseError(number, f"expected {type_.size} {type_.dtype.value} at {key!r}")
        return {"value": ConstantData(raw, type_.dtype, type_.shape)}, rest[match.end() :]


class _Values:
    """The attribute block `` {k=v, ...}`` at the start of ``text``, read left to right."""

    def __init__(self, number: int, text: str, data: dict[str, str], result: str):
        self.number, self.text, self.data, self.result = number, text, data, result
        self.at = 0

    def attributes(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if not self.text.startswith(" {"):
            return params
        self.at = 2
        while True:
            name = _ATTRIBUTE_NAME.match(self.text, self.at)
            if name is None or name.group(1) in params:
                self.fail("an attribute `name=`, each name once")
            self.at = name.end()
            params[name.group(1)] = self.value(name.group(1))
            if self.take("}"):
                return params
            if not self.take(", "):
                self.fail("`, ` or `}`")

    def rest(self) -> str:
        return self.text[self.at :]

    def value(self, attribute: str) -> Any:
        if self.take("("):
            items: list[Any] = []
            while not self.take(")"):
                items.append(self.value(attribute))
                if self.take(",)"):
                    break
                if not self.take(", ") and not self.text.startswith(")", self.at):
                    self.fail("`, ` or `)`")
            return tuple(items)
        token = _TOKEN.match(self.text, self.at)
        if token is None:
            self.fail("a literal: a number, a quoted string, True, False, None, a dtype or a tuple")
        kind, text = token.lastgroup, token.group()
        if kind == "name" and text not in _NAMES:
            self.fail(f"a literal, not the name {text!r}")
        self.at = token.end()
        if kind == "string":
            try:  # a quoted string literal: the pattern admits no other
                return ast.literal_eval(text)
            except (SyntaxError, ValueError):
                self.fail("a string with valid escapes")
        if kind == "float":
            return float(text)
        if kind == "int":
            return int(text)
        if kind == "opaque":
            key = data_key(self.result, attribute)
            if key not in self.data:
                self.fail(f"an opaque string, but the data has none at {key!r}")
            return Opaque(self.data.pop(key))
        return _NAMES[text]

    def take(self, literal: str) -> bool:
        if self.text.startswith(literal, self.at):
            self.at += len(literal)
            return True
        return False

    def fail(self, expected: str) -> NoReturn:
        raise IRParseError(self.number, f"expected {expected} at {self.text[self.at :]!r}")


def _type(text: str) -> TensorType:
    """The type ``f32[4x8]`` (already matched by the grammar)."""
    dtype, dims = text[:-1].split("[")
    return TensorType(tuple(int(d) for d in dims.split("x") if d), _DTYPES[dtype])


def _names(text: str) -> list[int]:
    """The ids of ``%v0, %v3`` (already matched by the grammar)."""
    return [int(name[2:]) for name in text.split(", ")] if text else []


def _items(number: int, text: str, pattern: re.Pattern[str], expected: str) -> list[re.Match[str]]:
    """Each item of the comma-separated ``text`` matched by ``pattern``."""
    matches = []
    for item in text.split(", ") if text else []:
        match = pattern.fullmatch(item)
        if match is None:
            raise IRParseError(number, f"expected {expected}, found {item!r}")
        matches.append(match)
    return matches


def _check_host(number: int, host: Any) -> None:
    """A custom call's ``host`` must be a host function its already imported module declares."""
    module, _, name = host.partition(":") if isinstance(host, str) else ("", "", "")
    found = sys.modules.get(module)
    if found is None or name not in getattr(found, HOST_FUNCTIONS, ()):
        raise IRParseError(
            number,
            f"expected a host function declared in {HOST_FUNCTIONS} of an imported module, "
            f"found {host!r} (nothing is imported to find one)",
        )
