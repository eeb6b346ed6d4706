"""Fixtures of the nkipy-runtime tests: the stand-in libnrt, compiled once per session."""

import subprocess
from pathlib import Path

import pytest

STANDIN_SOURCE = Path(__file__).parent / "nrt_standin" / "libnrt_standin.c"


@pytest.fixture(scope="session")
def standin_path(tmp_path_factory) -> str:
    """The STAND-IN libnrt (not the Neuron Runtime) compiled into a temp dir with gcc."""
    out = tmp_path_factory.mktemp("nrt_standin") / "libnrt_standin.so"
    command = [
        "gcc",
        "-shared",
        "-fPIC",
        "-O1",
        "-Wall",
        "-Werror",
        "-o",
        str(out),
        str(STANDIN_SOURCE),
    ]
    subprocess.run(command, check=True)
    return str(out)
