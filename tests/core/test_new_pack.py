"""``nkipy-ops new-pack``: the files it writes, and the errors instead of overwriting anything.
(The tox env ``newpack`` installs a generated pack with pip and runs its own tests.)"""

import ast

from nkipy_cli import run

from nkipy_core.plugin.hook_api import DECLARATION, incompatibility


def test_new_pack_writes_an_installable_pack_and_says_what_to_do_next(tmp_path, capsys):
    code, out, err = run(capsys, "new-pack", "nkipy-ops-mine", "--dir", str(tmp_path))
    assert code == 0, err
    root = tmp_path / "nkipy-ops-mine"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == [
        "README.md",
        "pyproject.toml",
        "src/nkipy_ops_mine/__init__.py",
        "src/nkipy_ops_mine/plugin.py",
        "tests/conftest.py",
        "tests/test_plugin.py",
    ]
    assert f"wrote the op pack nkipy-ops-mine to {root}" in out
    assert "nkipy-ops list --pack nkipy-ops-mine" in out and f"pip install -e '{root}[test]'" in out
    pyproject = (root / "pyproject.toml").read_text()
    assert 'name = "nkipy-ops-mine"' in pyproject
    assert '[project.entry-points.nkipy]\nnkipy_ops_mine = "nkipy_ops_mine.plugin"' in pyproject
    for path in root.rglob("*.py"):
        ast.parse(path.read_text(), str(path))  # every file is valid Python
    plugin = ast.parse((root / "src/nkipy_ops_mine/plugin.py").read_text())
    (declared,) = [
        s.value.value
        for s in plugin.body
        if isinstance(s, ast.Assign) and s.targets[0].id == DECLARATION
    ]
    assert incompatibility(declared) == ""  # made for this core's hook API
    assert 'nkipy_conformance("nkipy-ops-mine")' in (root / "tests/test_plugin.py").read_text()


def test_new_pack_never_overwrites_and_rejects_names_pip_would(tmp_path, capsys):
    (tmp_path / "taken" / "src").mkdir(parents=True)
    code, _, err = run(capsys, "new-pack", "taken", "--dir", str(tmp_path))
    assert code == 2 and f"{tmp_path / 'taken'} already exists and is not empty" in err
    code, _, err = run(capsys, "new-pack", "-bad name-", "--dir", str(tmp_path))
    assert code == 2 and "is not a valid distribution name" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
