"""Which kernel line an error belongs to.

Errors are raised deep inside the interpreter, but the line worth showing is the kernel's: the
innermost frame in the running kernel's source file (the kernel or a helper defined beside it).
Outside a launch, or when the kernel calls into another module, the innermost frame outside the
interpreter stands in.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nkipy_ops_nki.errors import NKIError
from nkipy_ops_nki.interpreter.context import current

_OWN_DIRS = tuple(
    str(d) + "/" for d in (Path(__file__).parent, Path(__file__).parent.parent / "nki")
)


def kernel_frame() -> tuple[str, int, str]:
    """(file, line, function name) of the kernel code that is calling into the interpreter."""
    program = current.get()
    kernel_file = program.launch.kernel_file if program else None
    fallback = None
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_filename == kernel_file:
            return code.co_filename, frame.f_lineno, code.co_name
        if fallback is None and not code.co_filename.startswith(_OWN_DIRS):
            fallback = (code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return fallback or ("<unknown>", 0, "<unknown>")


def kernel_error(cls: type[NKIError], text: str) -> NKIError:
    """An error of type ``cls`` whose message is prefixed with the kernel line that caused it."""
    file, line, function = kernel_frame()
    return cls(f"{file}:{line} in {function}: {text}")
