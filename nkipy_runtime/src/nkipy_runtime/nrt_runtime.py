"""The ``nrt`` runtime: kernels compiled by ``neuronx-cc`` and run by the Neuron Runtime.

Compiling and running are separate on purpose. Compiling needs only ``neuronx-cc`` and jaxlib
(``can_compile``), so a CPU build box can fill the kernel cache ahead of time
(``nkipy-ops precompile``); running needs the NRT library and Neuron devices as well
(``available``). ``load`` rebuilds an executable from a cache entry without the compiler, which
is all a Trainium host does with a cache copied from the build box.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nkipy_core import FallbackWarning, env
from nkipy_core.errors import ConfigurationError
from nkipy_core.ir import DType, Kernel, TensorType
from nkipy_core.runtime import CompileOptions, DeviceArray, DeviceStats, Signature

from . import neuronx_cc
from .hlo_files import HLO_PROTO, HLO_TEXT, hlo_artifacts
from .neuron import NeuronProfile, NeuronProfileError, profile_for, violations
from .neuron.f64 import has_f64, narrow_f64, narrow_type
from .nrt import probe

NEFF, LOG = "kernel.neff", "neuronx-cc.log"


class NrtExecutable:
    """A compiled kernel: its NEFF plus the files that explain where it came from."""

    def __init__(self, signature: Signature, artifacts: Mapping[str, bytes], narrowed: bool):
        self.signature = signature
        self._artifacts = dict(artifacts)
        #: compiled with f64 narrowed to f32 (``neuron.f64``): ``run`` converts around it
        self.narrowed = narrowed

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
        """Everything of the profile that changes a kernel's HLO or the planner's decisions."""
        profile = self.profile(options)
        f64 = "-f64as32" if profile.f64_as_f32 else ""
        return f"{profile.target}-int{64 if profile.native_int64 else 32}{f64}"

    def _hlo(self, kernel: Kernel, profile: NeuronProfile) -> dict[str, bytes]:
        """The HLO files of ``kernel`` as the target runs it (f64 narrowed if opted into)."""
        if profile.f64_as_f32 and has_f64(kernel):
            kernel = narrow_f64(kernel)
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
        signature = Signature.of(kernel)
        return NrtExecutable(
            signature,
            {**files, NEFF: build.neff, LOG: build.log.encode()},
            _narrows(profile, signature),
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
        return NrtExecutable(signature, artifacts, _narrows(self.profile(options), signature))

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
        outputs = executable.signature.outputs
        if not executable.narrowed:
            return self._device_handle().run(executable.neff, list(inputs), outputs)
        _warn_f64_staging()
        staged: list[DeviceArray] = []
        try:
            for given in inputs:
                staged.append(
                    self._convert(given, DType.f32) if given.dtype is DType.f64 else given
                )
            results = self._device_handle().run(
                executable.neff, staged, tuple(narrow_type(t) for t in outputs)
            )
        finally:
            for new, given in zip(staged, inputs):
                if new is not given:
                    self.free(new.buffer)
        try:
            return [
                self._convert(result, DType.f64) if type_.dtype is DType.f64 else result
                for result, type_ in zip(results, outputs)
            ]
        finally:
            for result, type_ in zip(results, outputs):
                if type_.dtype is DType.f64:  # the f32 result the wide copy was made from
                    self.free(result.buffer)

    def _convert(self, array: DeviceArray, dtype: DType) -> DeviceArray:
        """A new device array of ``array``'s values in ``dtype``, through the host."""
        host = self.to_host(array).astype(dtype.numpy)
        out = DeviceArray.contiguous(self.allocate(host.nbytes), TensorType(array.shape, dtype))
        self.to_device(host, out)
        return out


def _narrows(profile: NeuronProfile, signature: Signature) -> bool:
    """Whether kernels of ``signature`` run narrowed to f32 under ``profile``."""
    return profile.f64_as_f32 and any(
        t.dtype is DType.f64 for t in (*signature.inputs, *signature.outputs)
    )


@functools.cache
def _warn_f64_staging() -> None:
    warnings.warn(
        "nrt kernels compute f64 in f32 (NKIPY_NEURON_F64=f32): their f64 inputs and outputs are "
        "converted on the host, a round trip each that the device's transfer counters show; "
        "keep tensors in f32 (or bf16) to stay on the device",
        FallbackWarning,
        stacklevel=2,
    )
