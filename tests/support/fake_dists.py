"""Tiny installed distributions written into a directory put on ``sys.path``: entry-point
discovery of third-party packs, tested for real without pip."""

import textwrap


def write_distribution(site, name, module, source):
    """A minimal installed distribution: ``<name>-0.1.dist-info`` with an ``nkipy`` entry point."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[nkipy]\n{name} = {module}\n")
    (site / f"{module}.py").write_text(textwrap.dedent(source))
