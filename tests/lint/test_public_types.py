"""Type checkers see the names ``nkipy_core`` exports, though it imports them on first use.

The package's ``__getattr__`` returns them at run time; to mypy, a name it does not also bind
under ``TYPE_CHECKING`` would be ``Any`` (every use unchecked) and, where re-exports must be
explicit (``mypy --strict``), an error to import.
"""

from pathlib import Path

from mypy import api

import nkipy_core

SOURCE = Path(__file__).resolve().parents[2] / "nkipy_core" / "src"

# torch is left out (``Any`` to mypy): it is what makes a check slow, and no name here is torch's
CONFIG = f"""\
[mypy]
python_version = 3.11
mypy_path = {SOURCE}
follow_imports = silent
[mypy-nkipy_core]
implicit_reexport = False
[mypy-torch,torch.*]
follow_imports = skip
"""


def _revealed(tmp_path: Path, names: list[str], expressions: list[str]) -> dict[str, str]:
    """What mypy reveals of each expression after ``from nkipy_core import <names>``."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        f"from nkipy_core import {', '.join(names)}\n\n"
        + "".join(f"reveal_type({e})\n" for e in expressions)
    )
    config = tmp_path / "mypy.ini"
    config.write_text(CONFIG)
    out, err, status = api.run(
        [f"--config-file={config}", f"--cache-dir={tmp_path / 'cache'}", str(snippet)]
    )
    assert status == 0, out + err
    marker = 'Revealed type is "'
    revealed = [line.split(marker, 1)[1][:-1] for line in out.splitlines() if marker in line]
    return dict(zip(expressions, revealed, strict=True))


def test_the_exported_names_have_their_types(tmp_path):
    names = sorted(nkipy_core.__all__)
    revealed = _revealed(tmp_path, names, [*names, "knp.exp"])
    untyped = sorted(e for e, type_ in revealed.items() if type_ == "Any")
    assert not untyped, f"bind {untyped} under TYPE_CHECKING in nkipy_core/__init__.py"
    assert revealed["init_nkipy_backend"].endswith("-> nkipy_core.config.settings.Config")
    assert revealed["FallbackWarning"].endswith("-> nkipy_core.compiler.fallback.FallbackWarning")
    assert revealed["cache_stats"].startswith("collections.Counter")
    assert "nkipy_core.ir.builder.Traced" in revealed["knp.exp"]
