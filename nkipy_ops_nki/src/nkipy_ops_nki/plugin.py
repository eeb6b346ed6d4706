"""Plugin module of nkipy-ops-nki: lowers the ops of ``NKIOpRegistry`` to custom calls, overrides
softmax with the pack's NKI kernel and fuses RMSNorm into its NKI op on runtimes that run
``AwsNeuronCustomNativeKernel`` custom calls.

The overrides are on only with ``NKIPY_NKI_OVERRIDES=1``. No runtime yet compiles an NKI kernel
into its device kernel (``nrt`` declares no ``custom_call_targets`` until neuronx-cc's NKI
frontend is wired in, docs/runtimes.md), so today they run on the ``cpu`` runtime's interpreter
only, which checks the kernels as the device would run them but is 5-11x slower than the base
rules' NumPy (``benchmarks/bench_nki.py``): installing the pack must not make every model on the
``cpu`` runtime slower. Ops registered with ``NKIOpRegistry``/``nki_op`` are lowered either way.
"""

from __future__ import annotations

from nkipy_core import declare_env, env, hookimpl
from nkipy_core.runtime import runs_custom_call

from . import custom_call
from .overrides import rules
from .registry import NKIOpRegistry
from .rmsnorm_pass import rmsnorm_pass

#: the nkipy hook API versions this pack works with (nkipy_core.plugin.hook_api)
NKIPY_HOOK_API = ">=1.0,<2"


#: the switch of the softmax and RMSNorm overrides: "1" turns them on
OVERRIDES_ENV = "NKIPY_NKI_OVERRIDES"
declare_env(
    OVERRIDES_ENV,
    kind="flag",
    default=False,
    meaning="On: nkipy-ops-nki's NKI kernels replace softmax and fuse RMSNorm, on runtimes that "
    "run NKI custom calls.",
    owner="nkipy-ops-nki",
)


def overrides_enabled() -> bool:
    return env(OVERRIDES_ENV)


@hookimpl
def nkipy_register_lowerings(registry):
    if overrides_enabled():
        rules.install(registry)
    NKIOpRegistry.install(registry)


@hookimpl
def nkipy_graph_passes(stage, runtime):
    if stage == "aten" and overrides_enabled() and runs_custom_call(runtime, custom_call.TARGET):
        return [rmsnorm_pass]
    return None
