"""The public API is declared, and names leave it only through a deprecation.

``public_api.txt`` is the API as released: every ``module:name`` of ``PUBLIC_MODULES``'
``__all__``. A name missing from the code but still in the file has been removed without a
deprecation (it must first be listed in ``nkipy_core.plugin.hook_api.DEPRECATED`` for a minor release,
see docs/writing-a-pack.md); a name in the code but not in the file is new public API, to be
added to the file on purpose. And packs import only those modules, so the layering holds.
"""

import ast
import importlib
from pathlib import Path

import pytest
from repo_sources import PACK_SOURCES, ROOT

from nkipy_core.plugin.hook_api import DEPRECATED, PUBLIC_MODULES

RELEASED = Path(__file__).with_name("public_api.txt")
#: private modules the first-party packs of this repository may import too, and why: they ship
#: and are tested together with nkipy-core, so a change to these lands in one commit
FIRST_PARTY_ONLY = {
    "nkipy_core._torch": "the one door to torch's private API, with a canary per symbol",
}


def _current() -> set[str]:
    names = set()
    for module in PUBLIC_MODULES:
        exported = importlib.import_module(module).__all__
        names |= {f"{module}:{name}" for name in exported}
    return names


def _released() -> set[str]:
    return {line for line in RELEASED.read_text().splitlines() if line and not line.startswith("#")}


def test_every_public_module_declares_all_and_every_name_resolves():
    for module in PUBLIC_MODULES:
        imported = importlib.import_module(module)
        assert isinstance(imported.__all__, (list, tuple)), f"{module} declares no __all__"
        for name in imported.__all__:
            assert getattr(imported, name, None) is not None, (
                f"{module}.__all__ names {name}, which does not resolve"
            )


def test_no_public_name_disappears_without_a_deprecation():
    removed = _released() - _current() - set(DEPRECATED)
    assert not removed, (
        f"public names removed without a deprecation: {sorted(removed)}. Keep them for one minor release, "
        "listed in nkipy_core.plugin.hook_api.DEPRECATED with a DeprecationWarning, before removing them."
    )


def test_new_public_names_are_added_to_the_released_list_on_purpose():
    added = _current() - _released()
    assert not added, (
        f"new public names {sorted(added)}: add them to {RELEASED.name} if they are meant to be public"
    )


def _nkipy_core_imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("nkipy_core")
        ):
            yield node.lineno, node.module
            if node.module == "nkipy_core":  # `from nkipy_core import _torch`: a module
                yield from (
                    (node.lineno, f"nkipy_core.{a.name}") for a in node.names if a.name[0] == "_"
                )
        elif isinstance(node, ast.Import):
            yield from (
                (node.lineno, a.name) for a in node.names if a.name.startswith("nkipy_core")
            )


@pytest.mark.parametrize("source", PACK_SOURCES, ids=lambda p: p.parent.name)
def test_packs_import_only_the_public_modules(source):
    private = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted(source.rglob("*.py"))
        for line, module in _nkipy_core_imports(path)
        if module not in PUBLIC_MODULES and module not in FIRST_PARTY_ONLY
    ]
    assert not private, (
        "packs may import only "
        + ", ".join(PUBLIC_MODULES)
        + " (and, first-party only, "
        + ", ".join(FIRST_PARTY_ONLY)
        + "); these do not:\n"
        + "\n".join(private)
    )
