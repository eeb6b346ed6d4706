"""Where libnrt is: the one thing the hardware probe needs, with nothing heavier than the stdlib.

``torch.nkipy.is_available()`` runs the ``nkipy.hardware`` probe in every program that dynamo
compiles, so this module (and the probe) must import in well under a millisecond.
"""

from __future__ import annotations

import ctypes.util
import functools
import os

from nkipy_core import declare_env, env

#: where the Neuron SDK's aws-neuronx-runtime-lib package installs libnrt
STANDARD_LOCATIONS = ("/opt/aws/neuron/lib/libnrt.so.1", "/opt/aws/neuron/lib/libnrt.so")
LIBRARY_ENV = "NKIPY_LIBNRT"
declare_env(
    LIBRARY_ENV,
    kind="file",
    meaning="The libnrt to load; unset: the Neuron SDK's install path, else the linker's.",
    owner="nkipy-runtime",
)


def find_library() -> str | None:
    """The libnrt to load: ``$NKIPY_LIBNRT``, else the Neuron SDK's install path, else the linker's."""
    given = env(LIBRARY_ENV)
    if given is not None:
        return given
    for path in STANDARD_LOCATIONS:
        if os.path.exists(path):
            return path
    return linker_library()


@functools.cache
def linker_library() -> str | None:
    """The linker's libnrt, looked up once per process: ``ctypes.util.find_library`` runs
    ``ldconfig``/``gcc`` in a subprocess (~25 ms), and the ``nrt`` runtime's ``available()``,
    which every ``select_runtime`` asks first, ends here on machines without the Neuron SDK."""
    return ctypes.util.find_library("nrt")
