"""Plugin module of nkipy-ops-collectives: the ``_c10d_functional`` lowerings (``lowerings``), and
the ``nkipy`` torch.distributed backend (``registration``), registered again here so processes
that skipped torch's device autoload get it too."""

from nkipy_core import hookimpl

from . import lowerings
from .registration import register

register()


@hookimpl
def nkipy_register_lowerings(registry) -> None:
    lowerings.RULES.install(registry)
