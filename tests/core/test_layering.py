"""The layering of nkipy_core: the ``nkipy`` device sits on top; nothing below imports it.

From the bottom: the buffer layer (``memory``: tensors <-> runtime buffers) and the neutral
modules both sides use (``device_contract``, ``aten_schema``); the compiler (``compiler``,
``kernel_call``, ``regions``, ``config``, ...); the device (``nkipy_core/device/``), whose eager
ops run single-op kernels through the compiler. An import of the device from below, even one
inside a function, brings back the cycle between compiler and device. Two modules sit above
the device and may import it (``ABOVE_THE_DEVICE``, with why).
"""

import ast
from pathlib import Path

import nkipy_core

ROOT = Path(nkipy_core.__file__).parent

ABOVE_THE_DEVICE = {
    "__init__.py": "importing nkipy_core registers the device (when torch's autoload did not)",
    "cli.py": "`nkipy-ops` reports whether torch has the device",
}


def device_imports(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import of ``nkipy_core.device`` or below in ``source``, a module
    of ``package``, at any depth (functions included), relative imports resolved."""
    parts = package.split(".")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        hits = [n for n in names if n == "nkipy_core.device" or n.startswith("nkipy_core.device.")]
        if hits:
            found.append((node.lineno, max(hits, key=len)))  # the most precise: device.memory
    return sorted(found)


def test_no_module_below_the_device_imports_it():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[0] == "device" or relative.as_posix() in ABOVE_THE_DEVICE:
            continue
        package = ".".join(["nkipy_core", *relative.parts[:-1]])
        offenders += [
            f"nkipy_core/{relative.as_posix()}:{line} imports {module}"
            for line, module in device_imports(path.read_text(), package)
        ]
    assert not offenders, "modules below the nkipy device import it:\n" + "\n".join(offenders)


def test_the_check_finds_imports_inside_functions_and_relative_ones():
    source = (
        "from .. import device\n"
        "def f():\n"
        "    from ..device import eager\n"
        "    import nkipy_core.device.aten\n"
        "from .. import memory\n"
        "from ..device_contract import NAME\n"
    )
    assert device_imports(source, "nkipy_core.testing") == [
        (1, "nkipy_core.device"),
        (3, "nkipy_core.device.eager"),
        (4, "nkipy_core.device.aten"),
    ]
