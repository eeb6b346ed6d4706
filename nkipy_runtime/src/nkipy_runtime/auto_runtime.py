"""The ``auto`` runtime: each kernel starts on the ``cpu`` runtime and moves to ``xla`` once it has
run long enough on the ``cpu`` runtime to pay for XLA's compile, if XLA runs it faster.

The two host runtimes win on different kernels: the ``cpu`` runtime compiles a kernel in
milliseconds and pays one NumPy call per operation, XLA compiles it in 0.3 s to seconds and fuses
(``docs/benchmarks.md``: XLA is ahead on convolutions, half floats and large forward passes, the
``cpu`` runtime on small kernels and elementwise optimizer steps). Which one is faster for a
kernel is measured, not guessed. Which kernels run long enough to matter is not known when they
compile, so the choice follows the ski-rental rule: a kernel is compiled for XLA only once it has
spent ``NKIPY_AUTO_PAYBACK`` seconds (about what an XLA compile costs) on the ``cpu`` runtime,
which bounds what the trial can cost to about twice what knowing the future would have cost.
Then its next ``TRIAL_CALLS`` calls on each runtime, alternating, decide where it runs. Every call
computes the real result, on one runtime or the other; results agree within each runtime's
rounding (the conformance suite runs both).

Device memory, eager ops on the ``nkipy`` device and kernels with collectives or host custom
calls (which only the ``cpu`` runtime runs) stay on the ``cpu`` runtime: only graphs of CPU
tensors, through ``run_host``, move. The decisions are per process: a new process measures again
(its ``cpu`` kernels come from the kernel cache as usual).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from nkipy_core import declare_env, env
from nkipy_core.ir import Kernel, primitive
from nkipy_core.runtime import CompileOptions, CpuRuntime, Signature

from .host_memory import CpuDeviceMemory
from .xla_runtime import XlaRuntime

log = logging.getLogger("nkipy.runtime.auto")

PAYBACK_ENV = "NKIPY_AUTO_PAYBACK"
declare_env(
    PAYBACK_ENV,
    kind="seconds",
    default=1.0,  # about what an XLA compile of a model's kernel takes (0.3-1 s, more if large)
    meaning=(
        "The `auto` runtime: seconds a kernel runs on the `cpu` runtime before it is compiled for "
        "`xla` and tried there (0 tries every kernel at its first call)."
    ),
    owner="nkipy-runtime",
)
#: calls of each runtime, alternating, that decide where a kernel runs (after one XLA call that
#: is not counted: XLA's first run of an executable sets it up)
TRIAL_CALLS = 3


@attrs.define
class Routing:
    """Where one kernel runs, and what decided it (``AutoRuntime.routing``)."""

    #: the kernel's name
    kernel: str
    #: ``"cpu"`` or ``"xla"``
    runtime: str = "cpu"
    #: the fastest of its trial calls on each runtime, seconds (``None``: not tried)
    cpu_seconds: float | None = None
    xla_seconds: float | None = None
    #: seconds XLA took to compile it (``None``: not compiled)
    xla_compile_seconds: float | None = None
    #: why it stays on the cpu runtime without a trial, or ``"on trial"``
    reason: str = ""


class AutoExecutable:
    """A kernel's ``cpu`` executable, and its XLA one once it has paid for itself."""

    def __init__(self, cpu: Any, options: CompileOptions):
        self.cpu = cpu
        self.signature: Signature = cpu.signature
        self.options = options
        self.xla: Any = None
        #: seconds spent on the cpu runtime before the trial
        self.spent = 0.0
        #: trial call times per runtime
        self.trial: dict[str, list[float]] = {"cpu": [], "xla": []}
        #: where it runs: ``None`` while it runs on the cpu runtime before its trial
        self.routing: Routing | None = None
        #: the runtime it runs on from now on; ``None`` until decided (during a trial too)
        self.decided: str | None = None
        if not _movable(cpu.kernel):
            reason = "holds collectives or custom calls, which only the cpu runtime runs"
            self.routing, self.decided = Routing(cpu.kernel.name, reason=reason), "cpu"

    @property
    def kernel(self) -> Kernel:
        return self.cpu.kernel

    def artifacts(self) -> Mapping[str, bytes]:
        return self.cpu.artifacts()


def _movable(kernel: Kernel) -> bool:
    """Whether XLA can run ``kernel`` in this process (no collective, no custom call)."""
    return not any(op.prim == "custom_call" or primitive(op.prim).collective for op in kernel.ops)


class AutoRuntime(CpuDeviceMemory):
    """``cpu`` first, ``xla`` for the kernels that run long enough and faster there (see the
    module's docstring). Opt in with ``NKIPY_RUNTIME=auto``."""

    name = "auto"
    priority = -5  # never the default: installing the xla extra changes no program
    hardware = False
    kernel_collectives = True  # kernels holding them stay on the cpu runtime
    host_custom_calls = True
    device_name = CpuRuntime.device_name

    def __init__(self) -> None:
        self.cpu = CpuRuntime()
        self.xla = XlaRuntime()
        self.stats = self.cpu.stats
        #: every kernel this process compiled for XLA, in that order, and where it runs
        self.routing: list[Routing] = []

    def available(self) -> tuple[bool, str]:
        ok, reason = self.xla.available()
        return (True, "") if ok else (False, f"needs the xla runtime: {reason}")

    def describe(self) -> str:
        return (
            f"cpu first; a kernel that has run {env(PAYBACK_ENV):g} s there is compiled for xla "
            f"and runs where {TRIAL_CALLS} calls on each were faster"
        )

    def compile(self, kernel: Kernel, options: CompileOptions) -> AutoExecutable:
        return AutoExecutable(self.cpu.compile(kernel, options), options)

    def load(
        self, artifacts: Mapping[str, bytes], signature: Signature, options: CompileOptions
    ) -> AutoExecutable:
        return AutoExecutable(self.cpu.load(artifacts, signature, options), options)

    # -- graphs of CPU tensors: where kernels move -----------------------------------------

    def run_host(
        self, executable: AutoExecutable, arrays: Sequence[np.ndarray]
    ) -> list[np.ndarray]:
        return self._run(executable, arrays, ())

    def run_host_into(
        self,
        executable: AutoExecutable,
        arrays: Sequence[np.ndarray],
        writes: Sequence[tuple[int, int]],
    ) -> list[np.ndarray]:
        """``run_host`` leaving each result ``k`` of ``writes`` in ``arrays[j]``: written there
        by the cpu kernel where it can (``CpuRuntime.run_host_into``), copied in after an XLA
        call (XLA on the host cannot write into memory it did not allocate)."""
        return self._run(executable, arrays, writes)

    def _run(
        self,
        executable: AutoExecutable,
        arrays: Sequence[np.ndarray],
        writes: Sequence[tuple[int, int]],
    ) -> list[np.ndarray]:
        if executable.decided is not None:
            return self._on(executable.decided, executable, arrays, writes)
        if executable.xla is None:
            start = time.perf_counter()
            results = self._on("cpu", executable, arrays, writes)
            executable.spent += time.perf_counter() - start
            if executable.spent >= env(PAYBACK_ENV):
                self._compile_for_xla(executable)
            return results
        trial = executable.trial
        side = "xla" if len(trial["xla"]) <= len(trial["cpu"]) else "cpu"
        start = time.perf_counter()
        results = self._on(side, executable, arrays, writes)
        trial[side].append(time.perf_counter() - start)
        if len(trial["xla"]) > TRIAL_CALLS:  # the first XLA call is not counted
            self._decide(executable)
        return results

    def _on(
        self,
        side: str,
        executable: AutoExecutable,
        arrays: Sequence[np.ndarray],
        writes: Sequence[tuple[int, int]],
    ) -> list[np.ndarray]:
        if side == "cpu":
            if writes:
                return self.cpu.run_host_into(executable.cpu, arrays, writes)
            return self.cpu.run_host(executable.cpu, arrays)
        results = list(self.xla.run_host(executable.xla, arrays))
        for k, j in writes:
            np.copyto(arrays[j], results[k])
            results[k] = arrays[j]
        return results

    def _compile_for_xla(self, executable: AutoExecutable) -> None:
        """Compile the kernel for XLA and start its trial; a kernel XLA refuses stays on the
        cpu runtime."""
        routing = executable.routing = Routing(executable.kernel.name, reason="on trial")
        self.routing.append(routing)
        start = time.perf_counter()
        try:
            executable.xla = self.xla.compile(executable.kernel, executable.options)
        except Exception as exc:  # noqa: BLE001 - any compile failure keeps the working kernel
            log.warning(
                "nkipy auto: kernel %s stays on the cpu runtime: XLA: %s", routing.kernel, exc
            )
            routing.reason, executable.decided = f"XLA: {exc}", "cpu"
            return
        routing.xla_compile_seconds = time.perf_counter() - start
        log.info(
            "nkipy auto: kernel %s ran %.2f s on the cpu runtime; compiled for xla in %.2f s",
            routing.kernel,
            executable.spent,
            routing.xla_compile_seconds,
        )

    @staticmethod
    def _decide(executable: AutoExecutable) -> None:
        routing = executable.routing
        assert routing is not None
        cpu, xla = min(executable.trial["cpu"]), min(executable.trial["xla"][1:])
        routing.runtime, routing.reason = faster(cpu, xla), ""
        routing.cpu_seconds, routing.xla_seconds = cpu, xla
        executable.decided = routing.runtime
        if routing.runtime == "cpu":
            executable.xla = None  # its memory is not needed any more
        log.info(
            "nkipy auto: kernel %s runs on %s (%.3f ms on cpu, %.3f ms on xla)",
            routing.kernel,
            routing.runtime,
            1e3 * cpu,
            1e3 * xla,
        )


def faster(cpu_seconds: float, xla_seconds: float) -> str:
    """The runtime a kernel stays on: XLA only when its best call beat the cpu runtime's best by
    more than 10 %. Not all of an XLA call's cost is in it: its results are new memory at every
    call, whose pages fault in when torch first writes them, and the cpu runtime writes updated
    inputs in place. A near tie (a Llama layer's kernels, 4 % apart) keeps the kernel where it
    compiles in milliseconds."""
    return "xla" if xla_seconds < 0.9 * cpu_seconds else "cpu"
