"""What the import-linter contracts (``.importlinter``) cannot say about nkipy's imports.

The contracts keep each layer of nkipy_core above the ones it imports and the packs apart. These
tests add, over nkipy_core and every pack: no import cycle at all, inside a layer or a pack
included (a module imported inside a function counts, one under ``if TYPE_CHECKING:`` does not);
no module that uses another module's underscore names; and no nkipy_core module that imports
from the package root, whose names are re-exports for users and packs.

They need every pack importable (the tox env ``lint`` installs them all).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import grimp
import pytest

PACKAGES = (
    "nkipy_core",
    "nkipy_ops_base",
    "nkipy_ops_collectives",
    "nkipy_ops_nki",
    "nkipy_runtime",
)


def import_graph(*packages: str) -> grimp.ImportGraph:
    """The imports among the modules of ``packages``, as ``.importlinter`` counts them."""
    return grimp.build_graph(*packages, exclude_type_checking_imports=True, cache_dir=None)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return import_graph(*PACKAGES)


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of more than one
    module (Tarjan's algorithm, iterative), each sorted."""
    imports = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(imports[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(imports[successor])))
                    break
                if successor in on_stack:
                    low[module] = min(low[module], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def describe(graph: grimp.ImportGraph, cycle: list[str]) -> str:
    """A cycle's modules and the imports between them, with their lines."""
    members = set(cycle)
    lines = [f"cycle of {len(cycle)} modules: {', '.join(cycle)}"]
    for module in cycle:
        for imported in sorted(set(graph.find_modules_directly_imported_by(module)) & members):
            for detail in graph.get_import_details(importer=module, imported=imported):
                lines.append(
                    f"  {module}:{detail['line_number']} -> {imported}"
                    f"   ({detail['line_contents']})"
                )
    return "\n".join(lines)


def test_no_import_cycles(graph):
    found = cycles(graph)
    assert not found, "import cycles (break each with a registered callback, not an import):\n" + (
        "\n".join(describe(graph, c) for c in found)
    )


def test_the_cycle_finder_sees_imports_inside_functions_and_not_type_checking_ones(
    tmp_path, monkeypatch
):
    package = tmp_path / "layers_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "high.py").write_text("from layers_probe import low, typed\n")
    (package / "low.py").write_text("def up():\n    from layers_probe import high\n")
    (package / "typed.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from layers_probe import high\n"
    )
    (package / "alone.py").write_text("from layers_probe import low\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = import_graph("layers_probe")
    assert cycles(probe) == [["layers_probe.high", "layers_probe.low"]]
    assert "layers_probe.low:2 -> layers_probe.high" in describe(probe, cycles(probe)[0])


def _source(module: str) -> Path:
    """The file of ``module``, found from its top package's directory (nothing is imported)."""
    top, *rest = module.split(".")
    root = Path(importlib.util.find_spec(top).origin).parent
    path = root.joinpath(*rest)
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(
    module: str, source: str, modules: set[str], is_package: bool = False
) -> list[tuple[int, str]]:
    """(line, ``module.name``) of each underscore name ``source`` (the code of ``module``) takes
    from another of ``modules``: ``from x import _y``, or ``x._y`` where ``x`` names an
    imported module. An underscore *module* (``_torch``) may be imported: it is a door."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    bound: dict[str, str] = {}  # local name -> module it is bound to
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                name = f"{target}.{alias.name}"
                if name in modules:
                    bound[alias.asname or alias.name] = name
                elif _private(alias.name) and target != module:
                    found.append((node.lineno, name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else local
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = _dotted(node.value)
            if owner is None:
                continue
            head, _, rest = owner.partition(".")
            if head in bound:
                target = bound[head] + (f".{rest}" if rest else "")
                if target in modules and target != module:
                    found.append((node.lineno, f"{target}.{node.attr}"))
    return sorted(set(found))


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def test_no_module_uses_another_modules_underscore_names(graph):
    modules = set(graph.modules)
    offenders = []
    for module in sorted(modules):
        path = _source(module)
        is_package = path.name == "__init__.py"
        offenders += [
            f"{module}:{line} uses {name}"
            for line, name in private_uses(module, path.read_text(), modules, is_package)
        ]
    assert not offenders, (
        "underscore names used outside their module (give them a public name in the module "
        "that owns them, or move them to where they are used):\n" + "\n".join(offenders)
    )


def test_the_private_name_check_sees_from_imports_and_attributes_of_imported_modules():
    modules = {"nkipy_core", "nkipy_core.compiler", "nkipy_core.compiler.pipeline", "nkipy_core.x"}
    source = (
        "import torch\n"
        "import nkipy_core.compiler.pipeline\n"
        "from nkipy_core.compiler import pipeline as compiler\n"
        "from nkipy_core.compiler.pipeline import _plan, plan\n"
        "from .compiler.pipeline import _relative\n"
        "def f():\n"
        "    compiler._choose(torch._C, _own)\n"
        "    nkipy_core.compiler.pipeline._deep()\n"
        "    compiler.__doc__\n"
    )
    assert private_uses("nkipy_core.x", source, modules) == [
        (4, "nkipy_core.compiler.pipeline._plan"),
        (5, "nkipy_core.compiler.pipeline._relative"),
        (7, "nkipy_core.compiler.pipeline._choose"),
        (8, "nkipy_core.compiler.pipeline._deep"),
    ]


def test_no_nkipy_core_module_imports_the_package_root(graph):
    """``nkipy_core/__init__`` lazily re-exports names for users and packs, and registers the
    device when imported: inside nkipy_core, a name is imported from the module defining it."""
    importers = sorted(
        m
        for m in graph.find_modules_that_directly_import("nkipy_core")
        if m.startswith("nkipy_core.")
    )
    assert not importers, f"import from the defining module instead of nkipy_core: {importers}"
