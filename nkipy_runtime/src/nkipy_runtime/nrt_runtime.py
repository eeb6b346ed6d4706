"""The ``nrt`` runtime: kernels compiled by ``neuronx-cc`` and run by the Neuron Runtime.

Compiling and running are separate on purpose. Compiling needs only ``neuronx-cc`` and jaxlib
(``can_compile``), so a CPU build box can fill the kernel cache ahead of time
(``nkipy-ops precompile``); running needs the NRT library and Neuron devices as well
(``available``). ``load`` rebuilds an executable from a cache entry without the compiler, which
is all a Trainium host does with a cache copied from the build box.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nkipy_core import env
from nkipy_core.errors import ConfigurationError
from nkipy_core.ir import Kernel
from nkipy_core.runtime import CompileOptions, DeviceArray, DeviceStats, Signature

from . import neuronx_cc
from .hlo_files import HLO_PROTO, HLO_TEXT, hlo_artifacts
from .neuron import NeuronProfile, NeuronProfileError, profile_for, violations
from .nrt import probe

NEFF, LOG = "kernel.neff", "neuronx-cc.log"


class NrtExecutable:
    """A compiled kernel: its NEFF plus the files that explain where it came from."""

    def __init__(self, signature: Signature, artifacts: Mapping[str, bytes]):
        self.signature = signature
        self._artifacts = dict(artifacts)

    @property
    def neff(self) -> bytes:
        return self._artifacts[NEFF]

    def artifacts(self) -> Mapping[str, bytes]:
        return self._artifacts


def _answer(missing: list[str]) -> tuple[bool, str]:
    return (False, "missing: " + "; ".join(missing)) if missing else (True, "")


class NrtRuntime:
    """Trainium through ``neuronx-cc`` and NRT. Its compiles take seconds to minutes each, so the
    core runs independent ones in parallel (``parallel_compile``); a NEFF is specific to one
    instance family, so the resolved target is part of every cache key (``cache_tag``)."""

    name = "nrt"
    priority = 100
    hardware = True
    parallel_compile = True
    kernel_collectives = True  # run by the Neuron Runtime between the ranks' cores
    # No custom_call_targets yet: neuronx-cc replaces an AwsNeuronCustomNativeKernel custom call
    # with the kernel its backend config names, a config the NKI frontend (neuronxcc.nki) writes.
    # Until that step is built and checked on a Neuron host, NKI kernels run outside kernels here.

    def __init__(self) -> None:
        self._device: Any = None

    # -- availability ------------------------------------------------------------------------

    def can_compile(self) -> tuple[bool, str]:
        """Whether kernels can be compiled to NEFF here (no device needed)."""
        return _answer(probe.compiler_missing())

    def available(self) -> tuple[bool, str]:
        return _answer(probe.missing())

    # -- compiling ---------------------------------------------------------------------------

    def profile(self, options: CompileOptions) -> NeuronProfile:
        """The Neuron target profile kernels are emitted for and checked against."""
        return profile_for(neuronx_cc.resolve_target(options.target))

    def cache_tag(self, options: CompileOptions) -> str:
        profile = self.profile(options)
        return f"{profile.target}-int{64 if profile.native_int64 else 32}"

    def _hlo(self, kernel: Kernel, profile: NeuronProfile) -> dict[str, bytes]:
        return hlo_artifacts(kernel, narrow_int64=not profile.native_int64)

    def declines(self, kernel: Kernel, options: CompileOptions) -> str:
        """Why neuronx-cc for the configured target cannot take ``kernel`` ("" if it can): the
        planner asks this of each op, so an op the target cannot take stays on CPU."""
        profile = self.profile(options)
        found = violations(self._hlo(kernel, profile)[HLO_TEXT].decode(), profile)
        if not found:
            return ""
        # name an op of the model rather than a parameter
        first = min(found, key=lambda v: (not v.origin, v.opcode == "parameter"))
        return (
            f"neuronx-cc for {profile.name} does not take {first.opcode} on {first.dtype} "
            f"({first.detail}): it requires {first.rule.requires} ({first.rule.source})"
        )

    def compile(self, kernel: Kernel, options: CompileOptions) -> NrtExecutable:
        """Emit the kernel for the target, check it against the target's profile (a
        ``NeuronProfileError`` instead of a compiler failure minutes later), then compile it with
        the profile's flags before the user's."""
        profile = self.profile(options)
        files = self._hlo(kernel, profile)
        found = violations(files[HLO_TEXT].decode(), profile)
        if found:
            raise NeuronProfileError(kernel.name, profile, found)
        build = neuronx_cc.compile_neff(
            files[HLO_PROTO],
            target=profile.target,
            extra_args=" ".join([*profile.compiler_flags(), options.compiler_args]).strip(),
            timeout=neuronx_cc.timeout_seconds(),
        )
        return NrtExecutable(
            Signature.of(kernel), {**files, NEFF: build.neff, LOG: build.log.encode()}
        )

    def describe(self) -> str:
        """The Neuron profile kernels are compiled for here (``nkipy-ops doctor`` prints it
        even where the runtime is unavailable, as on a build box that precompiles)."""
        try:
            profile = self.profile(CompileOptions(target=env("NKIPY_TARGET")))
        except ConfigurationError as exc:
            return f"Neuron profile: none yet ({exc})"
        return (
            f"Neuron profile {profile.name}: kernels are checked against its rules before "
            f"neuronx-cc runs with {' '.join(profile.compiler_flags())}"
        )

    def load(
        self, artifacts: Mapping[str, bytes], signature: Signature, options: CompileOptions
    ) -> NrtExecutable:
        return NrtExecutable(signature, artifacts)

    # -- device memory and execution: the NRT binding's ----------------------------------------

    def _device_handle(self) -> Any:
        if self._device is None:
            from .nrt import NrtDevice, NrtLibrary

            # core 0 of what this process sees: NrtLibrary gives each local rank its own
            # cores (NEURON_RT_VISIBLE_CORES) before nrt_init
            self._device = NrtDevice(NrtLibrary.open(), core=0)
        return self._device

    def open_device(self) -> None:
        """Initialise NRT with this rank's cores now: too many local ranks for the visible
        cores is a ``CoreMappingError`` in ``init_process_group``."""
        self._device_handle().library.init()

    @property
    def stats(self) -> DeviceStats:
        return self._device_handle().stats

    def allocate(self, nbytes: int) -> Any:
        return self._device_handle().allocate(nbytes)

    def free(self, buffer: Any) -> None:
        self._device_handle().free(buffer)

    def to_device(self, host: np.ndarray, dst: DeviceArray) -> None:
        self._device_handle().to_device(host, dst)

    def to_host(self, src: DeviceArray) -> np.ndarray:
        return self._device_handle().to_host(src)

    def copy(self, src: DeviceArray, dst: DeviceArray) -> None:
        self._device_handle().copy(src, dst)

    def run(self, executable: NrtExecutable, inputs: Sequence[DeviceArray]) -> list[DeviceArray]:
        return self._device_handle().run(
            executable.neff, list(inputs), executable.signature.outputs
        )
