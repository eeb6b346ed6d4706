"""Plugin module of this pack: registers the ``nrt`` runtime (Trainium through ``neuronx-cc`` and NRT).

Importing it is cheap and safe without the Neuron SDK or jaxlib: the runtime only probes for them
when asked whether it is available."""

from nkipy_core.hookspecs import hookimpl

from .nrt_runtime import NrtRuntime


@hookimpl
def nkipy_register_runtimes(registry) -> None:
    registry.register(NrtRuntime())
