"""Plugin module of nkipy-runtime: registers the ``nrt`` runtime (Trainium through ``neuronx-cc``
and NRT), the ``xla`` runtime (the same HLO on XLA), the ``auto`` runtime (each kernel on the
faster of ``cpu`` and ``xla``) and the ``inductor`` runtime (kernels compiled by TorchInductor).

Importing it is cheap and safe without the Neuron SDK or jax: a runtime probes for what it needs
only when asked whether it is available, and imports jax when it first compiles or allocates, so
installing this pack does not slow down ``import torch`` or other backends.
"""

from nkipy_core import hookimpl

from .auto_runtime import AutoRuntime
from .inductor_runtime import InductorRuntime
from .nrt_runtime import NrtRuntime
from .xla_runtime import XlaRuntime

#: the nkipy hook API versions this pack works with (nkipy_core.plugin.hook_api)
NKIPY_HOOK_API = ">=1.0,<2"


@hookimpl
def nkipy_register_runtimes(registry) -> None:
    registry.register(NrtRuntime())
    registry.register(XlaRuntime())
    registry.register(AutoRuntime())
    registry.register(InductorRuntime())
