"""The table of environment variables (``nkipy_core.config.env``): the only reader of the
variables, the source of ``docs/configuration.md``, and strict about values."""

from __future__ import annotations

import ast
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path

import pytest
from repo_sources import ROOT, SOURCES

import nkipy_core
from nkipy_core.config import env
from nkipy_core.errors import ConfigurationError

PAGE = ROOT / "docs" / "configuration.md"
REGENERATE = "python docs/gen_configuration.py"
TABLE_MODULE = ROOT / "nkipy_core" / "src" / "nkipy_core" / "config" / "env.py"


def _unavailable_packs() -> set[str]:
    """Import every installed pack (they declare their variables at import); the distributions
    of those that cannot be imported here."""
    failed = set()
    for entry in entry_points(group="nkipy"):
        try:
            entry.load()
        except Exception:  # noqa: BLE001 - a pack whose dependencies are missing here
            failed.add(entry.dist.name if entry.dist else entry.value)
    return failed


def _rows(text: str) -> set[str]:
    return {line for line in text.splitlines() if line.startswith("| `")}


def _seen_here(row: str, unavailable: set[str]) -> bool:
    """Whether this environment can declare the variable of ``row``: its owner is nkipy-core's
    (a core variable or an input) or an installed pack that imports."""
    owner = row.rstrip(" |").rsplit("|", 1)[1].strip()
    if owner in (env.CORE, env.LAUNCHER, env.TORCH, env.NEURON_RUNTIME):
        return True
    try:
        version(owner)
    except PackageNotFoundError:
        return False
    return owner not in unavailable


def test_the_configuration_page_is_rendered_from_the_table():
    unavailable = _unavailable_packs()
    page, rendered = PAGE.read_text(), env.render()
    missing = sorted(_rows(rendered) - _rows(page))
    assert not missing, f"{PAGE.name} lacks or has old rows {missing}: run {REGENERATE}"
    stale = sorted(r for r in _rows(page) - _rows(rendered) if _seen_here(r, unavailable))
    assert not stale, f"{PAGE.name} has rows the table does not: {stale}: run {REGENERATE}"
    if _rows(page) == _rows(rendered):  # every pack of the page is here: the whole page
        assert page == rendered, f"{PAGE.name} is out of date: run {REGENERATE}"


def _module_strings(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments."""
    found = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found.update((t.id, node.value.value) for t in node.targets if isinstance(t, ast.Name))
    return found


def _is_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    ) or (isinstance(node, ast.Name) and node.id == "environ")


def _environment_reads(tree: ast.Module):
    """(line, key expression) of every read of one variable from ``os.environ``/``os.getenv``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and _is_environ(func.value):
                if func.attr in ("get", "setdefault", "pop", "__getitem__"):
                    yield node.lineno, node.args[0]
            elif (
                isinstance(func, ast.Attribute)
                and func.attr == "getenv"
                and isinstance(func.value, ast.Name)
                and func.value.id == "os"
            ) or (isinstance(func, ast.Name) and func.id == "getenv"):
                yield node.lineno, node.args[0]
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and _is_environ(node.value)
        ):
            yield node.lineno, node.slice
        elif isinstance(node, ast.Compare) and any(
            isinstance(op, (ast.In, ast.NotIn)) for op in node.ops
        ):
            if any(_is_environ(c) for c in node.comparators):
                yield node.lineno, node.left


def _nkipy_reads(path: Path, root: Path = ROOT) -> list[str]:
    """Reads of an ``NKIPY_*`` variable in ``path``, or of a variable whose name the scan
    cannot resolve (it might be one)."""
    tree = ast.parse(path.read_text(), str(path))
    strings = _module_strings(tree)
    found = []
    for line, key in _environment_reads(tree):
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            name = key.value
        elif isinstance(key, ast.Name) and key.id in strings:
            name = strings[key.id]
        else:
            name = None
        if name is None or name.startswith("NKIPY_"):
            found.append(f"{path.relative_to(root)}:{line}: {ast.unparse(key)}")
    return found


def test_only_the_table_reads_nkipy_variables():
    reads = [
        read
        for source in SOURCES
        for path in sorted(source.rglob("*.py"))
        if path != TABLE_MODULE
        for read in _nkipy_reads(path)
    ]
    assert not reads, (
        "these read an NKIPY_* environment variable (or one the scan cannot name) directly: "
        f"{reads}. Declare it in nkipy_core/config/env.py (a pack: nkipy_core.declare_env) and "
        "read it through the table."
    )


def test_the_scan_finds_direct_reads(tmp_path):
    source = tmp_path / "reader.py"
    source.write_text(
        "import os\nNAME = 'NKIPY_X'\na = os.environ.get(NAME)\nb = os.environ['NKIPY_Y']\n"
        "c = os.getenv(key)\nd = os.environ.get('HOME')\ne = 'NKIPY_Z' in os.environ\n"
    )
    assert _nkipy_reads(source, tmp_path) == [
        "reader.py:3: NAME",
        "reader.py:4: 'NKIPY_Y'",
        "reader.py:5: key",
        "reader.py:7: 'NKIPY_Z'",
    ]


def test_a_bad_value_names_the_variable_and_what_it_accepts(monkeypatch):
    monkeypatch.setenv("NKIPY_CACHE_LOCK_TIMEOUT", "an hour")
    with pytest.raises(ConfigurationError, match="NKIPY_CACHE_LOCK_TIMEOUT='an hour'.*seconds"):
        env.NKIPY_CACHE_LOCK_TIMEOUT.get()
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ConfigurationError, match="WORLD_SIZE='two'.*whole number"):
        env.env("WORLD_SIZE")
    monkeypatch.setenv("NKIPY_UPDATE_EXPECTED_FAILURES", "maybe")
    with pytest.raises(ConfigurationError, match="NKIPY_UPDATE_EXPECTED_FAILURES='maybe'"):
        env.NKIPY_UPDATE_EXPECTED_FAILURES.get()


def test_values_are_parsed_read_at_each_call_and_empty_is_unset(monkeypatch):
    monkeypatch.delenv("NKIPY_CACHE_LOCK_TIMEOUT", raising=False)
    assert env.NKIPY_CACHE_LOCK_TIMEOUT.get() == 3600.0
    monkeypatch.setenv("NKIPY_CACHE_LOCK_TIMEOUT", "2.5")
    assert env.NKIPY_CACHE_LOCK_TIMEOUT.get() == 2.5
    monkeypatch.setenv("NKIPY_CACHE_LOCK_TIMEOUT", "")
    assert env.NKIPY_CACHE_LOCK_TIMEOUT.get() == 3600.0
    assert env.env("LOCAL_RANK", {"LOCAL_RANK": "3"}) == 3
    assert env.env("LOCAL_RANK", {}) is None
    monkeypatch.setenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "true")  # torch: only "1" is on
    assert env.TORCH_DEVICE_BACKEND_AUTOLOAD.get() is False


def test_packs_declare_their_variables_through_the_public_api(monkeypatch):
    assert nkipy_core.declare_env is env.declare_env and nkipy_core.env is env.env
    monkeypatch.setattr(env, "_table", dict(env._table))  # the declaration ends with the test
    var = nkipy_core.declare_env(
        "NKIPY_EXAMPLE_PACK_FAST", kind="flag", default=False, meaning="m", owner="nkipy-ops-x"
    )
    assert var in env.table() and var.owner == "nkipy-ops-x"
    assert nkipy_core.env("NKIPY_EXAMPLE_PACK_FAST") is False
    monkeypatch.setenv("NKIPY_EXAMPLE_PACK_FAST", "yes")
    assert nkipy_core.env("NKIPY_EXAMPLE_PACK_FAST") is True
    monkeypatch.setenv("NKIPY_EXAMPLE_PACK_FAST", "2")
    with pytest.raises(ConfigurationError, match="NKIPY_EXAMPLE_PACK_FAST='2'"):
        nkipy_core.env("NKIPY_EXAMPLE_PACK_FAST")


def test_a_variable_is_declared_once():
    declared = env.NKIPY_TARGET
    again = env.declare_env(
        declared.name,
        kind=declared.kind.name,
        default=declared.default,
        meaning=declared.meaning,
        owner=declared.owner,
    )
    assert again is declared
    with pytest.raises(ConfigurationError, match="NKIPY_TARGET is declared twice"):
        env.declare_env("NKIPY_TARGET", kind="text", meaning="something else", owner="a-pack")
    with pytest.raises(ConfigurationError, match="unknown kind 'number'"):
        env.declare_env("NKIPY_SOMETHING", kind="number", meaning="", owner="a-pack")
    with pytest.raises(ConfigurationError, match="NKIPY_UNDECLARED is not declared"):
        env.env("NKIPY_UNDECLARED")
