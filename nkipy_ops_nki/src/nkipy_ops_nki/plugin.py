"""Plugin module of nkipy-ops-nki: lowers the ops of ``NKIOpRegistry`` to custom calls, overrides
softmax with the pack's NKI kernel and fuses RMSNorm into its NKI op on runtimes that run
``AwsNeuronCustomNativeKernel`` custom calls."""

from __future__ import annotations

from nkipy_core import hookimpl
from nkipy_core.runtime.base import runs_custom_call

from . import custom_call
from .overrides import rules
from .registry import NKIOpRegistry
from .rmsnorm_pass import rmsnorm_pass


@hookimpl
def nkipy_register_lowerings(registry):
    rules.install(registry)
    NKIOpRegistry.install(registry)


@hookimpl
def nkipy_graph_passes(stage, runtime):
    if stage == "aten" and runs_custom_call(runtime, custom_call.TARGET):
        return [rmsnorm_pass]
    return None
