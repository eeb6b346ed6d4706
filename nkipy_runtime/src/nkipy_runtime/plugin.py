"""Plugin module of nkipy-runtime: registers the ``xla`` runtime (and, with the Neuron pieces, ``nrt``).

Registering imports nothing heavy: jax is imported when the ``xla`` runtime first compiles or
allocates, so installing this pack does not slow down ``import torch`` or other backends.
"""

from nkipy_core import hookimpl

from .xla_runtime import XlaRuntime


@hookimpl
def nkipy_register_runtimes(registry) -> None:
    registry.register(XlaRuntime())
