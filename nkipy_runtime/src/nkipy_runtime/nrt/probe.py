"""What the ``nrt`` runtime needs from the machine, and whether it is there.

``missing()`` is what ``nkipy-ops doctor`` shows for ``nrt``: one line per absent piece, each
saying how to get it. ``hardware_present()`` is the ``nkipy.hardware`` entry point that
``torch.nkipy.is_available()`` asks in every program dynamo compiles, so it only looks at the
file system: it never loads libnrt (whose ``nrt_init`` would claim NeuronCores).
"""

from __future__ import annotations

import functools
import glob
import os

from .locate import LIBRARY_ENV, find_library

#: where the Neuron driver (aws-neuronx-dkms) creates one node per device: neuron0, neuron1, ...
DEVICE_DIR = "/dev"


def neuron_devices() -> list[str]:
    """The Neuron device nodes of this machine."""
    return sorted(glob.glob(os.path.join(DEVICE_DIR, "neuron[0-9]*")))


def compiler_missing() -> list[str]:
    """What keeps kernels from being compiled to NEFF here (no device needed for that)."""
    from nkipy_runtime import (  # not at import: the hardware probe must stay light
        neuronx_cc,
        xla_bridge,
    )

    found = []
    if neuronx_cc.compiler_path() is None:
        found.append(
            f"neuronx-cc is not on PATH (nor named by {neuronx_cc.COMPILER_ENV}): install the Neuron SDK "
            "compiler (pip install neuronx-cc --extra-index-url https://pip.repos.neuron.amazonaws.com) "
            "next to nkipy-runtime[neuron]"
        )
    ok, reason = xla_bridge.available()
    if not ok:
        found.append(reason)
    return found


def device_missing() -> list[str]:
    """What keeps NEFFs from running here: the NRT library and Neuron devices."""
    found = []
    if find_library() is None:
        found.append(
            "libnrt.so was not found (/opt/aws/neuron/lib, the linker path): install the Neuron SDK "
            f"package aws-neuronx-runtime-lib, or set {LIBRARY_ENV} to the library's path"
        )
    if not neuron_devices():
        found.append(
            f"no Neuron devices ({DEVICE_DIR}/neuron*): this is not a Trn1/Trn2/Inf2 instance, or the "
            "Neuron driver aws-neuronx-dkms is not installed"
        )
    return found


def missing() -> list[str]:
    """What keeps the ``nrt`` runtime from running here, and how to get it; empty when nothing."""
    return compiler_missing() + device_missing()


@functools.cache
def hardware_present() -> bool:
    """Whether this machine has a Neuron device and a libnrt to drive it (asked once per process)."""
    return os.path.exists(os.path.join(DEVICE_DIR, "neuron0")) and find_library() is not None
