"""The versioned contract between nkipy-core and op packs: the hook API version and the public API.

nkipy-core's release number says nothing to a pack about the hooks it calls: a bug-fix release
of the core may add a hook, a minor one may change an argument. So the hooks and the public
modules packs import carry their own version, ``HOOK_API_VERSION`` (``MAJOR.MINOR``): the minor
number grows when something is added or deprecated, the major one when something deprecated is
removed. A pack states the versions it works with in its plugin module::

    NKIPY_HOOK_API = ">=1.0,<2"

and the plugin manager loads it only if ``HOOK_API_VERSION`` is in that range; otherwise the
pack is reported as incompatible (``nkipy-ops list``) with the reason, and the others load.
The statement is read from the module's source before the module is imported, so a pack built
for another API is reported as incompatible, not as an ``ImportError`` from a renamed name.

Deprecation policy (docs/writing-a-pack.md): a hook or public name is deprecated for at least
one minor release before a major release removes it. A deprecated hook keeps working and its
hookspec carries pluggy's ``warn_on_impl``, so every pack implementing it gets a
``DeprecationWarning`` naming the replacement; a deprecated public name is listed in
``DEPRECATED`` and warns when used. ``tests/core/test_public_api.py`` fails when a public name
disappears without having gone through ``DEPRECATED``.
"""

from __future__ import annotations

import ast
import importlib.util
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

#: the hook API this nkipy-core provides (``MAJOR.MINOR``)
HOOK_API_VERSION = "1.2"

#: the modules a pack may import from; everything else in nkipy_core is internal
PUBLIC_MODULES = (
    "nkipy_core",
    "nkipy_core.errors",
    "nkipy_core.ir",
    "nkipy_core.knp",
    "nkipy_core.runtime",
    "nkipy_core.testing",
)

#: public names on their way out: ``"module:name" -> "since <version>; use <replacement>"``
DEPRECATED: dict[str, str] = {}

#: the module attribute in which a pack states the hook API versions it supports
DECLARATION = "NKIPY_HOOK_API"


def incompatibility(declared: str | None) -> str:
    """Why a pack declaring ``declared`` cannot be loaded by this core ("" if it can).

    A pack that declares nothing is loaded: packs written before the hook API was versioned
    keep working, and ``nkipy-ops list`` shows them without a range."""
    if declared is None:
        return ""
    try:
        supported = SpecifierSet(declared)
    except InvalidSpecifier:
        return f'its {DECLARATION} = {declared!r} is not a version range; write it like ">=1.0,<2"'
    if Version(HOOK_API_VERSION) in supported:
        return ""
    return (
        f"it supports nkipy hook API {declared}, and this nkipy-core provides {HOOK_API_VERSION}: "
        "install a release of the pack made for this hook API, or a nkipy-core that provides one "
        "it supports"
    )


def declared_range(plugin_module: str) -> str | None:
    """The ``NKIPY_HOOK_API`` string a plugin module assigns at top level, read from its source
    without importing it (``None`` if it assigns none or its source cannot be found).

    Finding a submodule imports its parent packages (as importing it would); the module itself
    is only parsed."""
    try:
        spec = importlib.util.find_spec(plugin_module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    with open(spec.origin, encoding="utf-8") as source:
        tree = ast.parse(source.read(), spec.origin)
    for statement in tree.body:
        if (
            isinstance(statement, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == DECLARATION for t in statement.targets)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        ):
            return statement.value.value
    return None


def declared_by(plugin: Any) -> str | None:
    """The range a loaded plugin object declares (for plugins registered in-process)."""
    value = getattr(plugin, DECLARATION, None)
    return value if isinstance(value, str) else None
