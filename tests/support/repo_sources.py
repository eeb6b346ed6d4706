"""Where the repository's distributions keep their sources, for the tests that scan them
(private torch use, environment reads, imports packs may make)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKS = ("nkipy_ops_base", "nkipy_ops_collectives", "nkipy_ops_nki", "nkipy_runtime")
#: the ``src`` folder of every distribution, the core first
SOURCES = [ROOT / d / "src" for d in ("nkipy_core", *PACKS)]
#: the ``src`` folder of every pack
PACK_SOURCES = SOURCES[1:]
