"""``nkipy-ops new-pack NAME``: write a pip-installable op pack that works out of the box.

The pack has what docs/writing-a-pack.md asks of one: a pyproject with the ``nkipy`` entry point,
a plugin module stating the hook API it was made for, one lowering rule (``aten::mish``, which
torch would otherwise decompose into five ops) and one decomposition (``aten::hardswish``), tests
of both (the rule as NumPy, compiled, and OpInfo conformance through the pytest plugin), a
conftest that registers the plugin when the pack is not installed, and a README. It depends on
nkipy-core alone, so its tests pass with or without nkipy-ops-base.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from pathlib import Path
from string import Template

from nkipy_core.cli.command import EXIT_OK, UsageError
from nkipy_core.errors import NkipyError
from nkipy_core.plugin.hook_api import HOOK_API_VERSION

#: PEP 508 distribution names
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


class PackExistsError(NkipyError):
    """The directory a new pack would be written to already holds files."""


def module_name(distribution: str) -> str:
    """The import name of a distribution (``nkipy-ops-foo`` -> ``nkipy_ops_foo``)."""
    return re.sub(r"[-.]+", "_", distribution).lower()


def write_pack(distribution: str, parent: Path) -> Path:
    """Write the pack ``distribution`` into ``parent / distribution``; its directory.

    Raises ``ValueError`` for a name pip would not accept and ``PackExistsError`` rather than
    overwrite anything."""
    if not _NAME.match(distribution):
        raise ValueError(
            f"{distribution!r} is not a valid distribution name: use letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit (e.g. nkipy-ops-mine)"
        )
    root = parent / distribution
    if root.exists() and any(root.iterdir()):
        raise PackExistsError(
            f"{root} already exists and is not empty: choose another NAME or --dir"
        )
    module = module_name(distribution)
    values = {
        "name": distribution,
        "module": module,
        "hook_api": f">={HOOK_API_VERSION},<{int(HOOK_API_VERSION.split('.')[0]) + 1}",
    }
    for relative, template in _FILES.items():
        path = root / Template(relative).substitute(values)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(textwrap.dedent(template).lstrip()).substitute(values))
    return root


_FILES = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "$name"
        version = "0.1.0"
        description = "An nkipy op pack"
        readme = "README.md"
        requires-python = ">=3.11"
        dependencies = ["nkipy-core>=0.1,<0.2"]

        [project.optional-dependencies]
        test = ["nkipy-core[testing]", "pytest>=8"]

        # nkipy finds the pack through this entry point: group `nkipy`, value = the plugin module
        [project.entry-points.nkipy]
        $module = "$module.plugin"

        [tool.setuptools.packages.find]
        where = ["src"]

        [tool.pytest.ini_options]
        testpaths = ["tests"]
    """,
    "src/$module/__init__.py": '''
        """$name: an nkipy op pack (its rules are in ``plugin``)."""
    ''',
    "src/$module/plugin.py": '''
        """The plugin module of $name: one lowering rule and one decomposition.

        A lowering rule turns one ATen op into NKIPy (``knp``, NumPy-flavoured) inside a kernel; a
        decomposition rewrites an op into other ATen ops before lowering. See docs/writing-a-pack.md.
        """

        import torch

        from nkipy_core import RuleSet, hookimpl, knp
        from nkipy_core.ir import DType

        #: the nkipy hook API versions this pack works with (nkipy_core.plugin.hook_api)
        NKIPY_HOOK_API = "$hook_api"

        rules = RuleSet()  # priority 0: this pack adds ops, it overrides none


        @rules.register(torch.ops.aten.mish.default)
        def mish(ctx, x):
            """``x * tanh(softplus(x))``; half floats are computed in float32 and rounded once, as torch does."""
            dtype = knp.dtype_of(x)
            v = knp.astype(x, DType.f32) if dtype.is_half else x
            softplus = knp.where(knp.greater(v, 20.0), v, knp.log1p(knp.exp(v)))
            return knp.astype(knp.multiply(v, knp.tanh(softplus)), dtype)


        def hardswish(x):
            """``x * clamp(x + 3, 0, 6) / 6`` in ATen ops, which the installed packs then lower."""
            return x * torch.clamp(x + 3, 0, 6) / 6


        @hookimpl
        def nkipy_register_lowerings(registry):
            rules.install(registry)


        @hookimpl
        def nkipy_register_decompositions(registry):
            registry.add(torch.ops.aten.hardswish.default, hardswish)
    ''',
    "tests/conftest.py": '''
        """Let the tests run whether or not the pack is pip-installed."""

        import sys
        from pathlib import Path

        from nkipy_core import plugins

        try:
            import $module  # noqa: F401 - installed
        except ModuleNotFoundError:
            sys.path.insert(0, str(Path(__file__).parents[1] / "src"))

        _registered_here = False


        def pytest_configure(config):
            """Register the plugin module in-process unless its entry point already loaded it."""
            global _registered_here
            from $module import plugin

            if not any(s.name == "$module" and s.ok for s in plugins.get().statuses):
                plugins.register(plugin, name="$module", distribution="$name", version="0.1.0")
                plugins.reload()
                _registered_here = True


        def pytest_unconfigure(config):
            if _registered_here:
                plugins.unregister("$module")
                plugins.reload()
    ''',
    "tests/test_plugin.py": '''
        """The rule as NumPy, the rule compiled, the decomposition, and PyTorch's OpInfos."""

        import warnings

        import numpy as np
        import torch
        import torch.nn.functional as F

        from nkipy_core import FallbackWarning, plugins
        from $module.plugin import hardswish, mish


        def test_rule_is_numpy_code():
            x = np.linspace(-30, 30, 101, dtype=np.float32)
            np.testing.assert_allclose(mish(None, x), F.mish(torch.from_numpy(x)).numpy(), rtol=1e-6, atol=1e-7)


        def test_compiles_into_one_kernel(tmp_path):
            fn = torch.compile(F.mish, backend="nkipy", options={"nkipy_cache": str(tmp_path)})
            x = torch.randn(4, 8) * 5
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)  # mish must be lowered, not run on CPU
                torch.testing.assert_close(fn(x), F.mish(x))
            (kernel,) = tmp_path.glob("kernels/*/kernel.py")
            assert "aten::mish.default via $module.plugin.mish" in kernel.read_text()


        def test_decomposition_is_registered_and_right():
            added = plugins.get().decompositions.added["aten::hardswish.default"]
            assert added[0] is hardswish and added[1].distribution == "$name"
            x = torch.linspace(-5, 5, 41)
            torch.testing.assert_close(hardswish(x), F.hardswish(x))


        def test_conformance_with_pytorch_opinfos(nkipy_conformance):
            nkipy_conformance("$name")
    ''',
    "README.md": """
        # $name

        An op pack for [nkipy](https://pypi.org/project/nkipy-core/): it lowers `aten::mish` to one
        NKIPy expression and decomposes `aten::hardswish` into ATen ops. Made by `nkipy-ops new-pack`.

        ```
        pip install -e .
        nkipy-ops list --pack $name
        pytest
        ```

        - `src/$module/plugin.py`: the rules; `NKIPY_HOOK_API` states the hook API they were written for.
        - `tests/test_plugin.py`: the rule as NumPy, compiled, and OpInfo conformance
          (`nkipy_conformance`, fp32 and bf16, forward and backward). Failures you expect on purpose go
          in `tests/conformance_expected_failures.txt` (`NKIPY_UPDATE_EXPECTED_FAILURES=1 pytest` writes it).
        - The tests also run without installing the pack: `tests/conftest.py` registers the plugin.
    """,
}


def cmd_new_pack(args: argparse.Namespace) -> int:
    """Write a new op pack and say how to install and test it."""
    try:
        root = write_pack(args.name, Path(args.dir))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    print(f"wrote the op pack {args.name} to {root}:")
    print("\n".join(f"  {f}" for f in files))
    print(
        f"next:\n  pip install -e '{root}[test]'\n  nkipy-ops list --pack {args.name}\n  pytest {root}"
    )
    return EXIT_OK
