"""Plugin module of nkipy-ops-collectives: the ``_c10d_functional`` lowerings (``lowerings``), and
the ``nkipy`` torch.distributed backend (``registration``), registered again here so processes
that skipped torch's device autoload get it too."""

from nkipy_core import hookimpl

from . import lowerings
from .registration import register

#: the nkipy hook API versions this pack works with (nkipy_core.plugin.hook_api)
NKIPY_HOOK_API = ">=1.0,<2"

register()


@hookimpl
def nkipy_register_lowerings(registry) -> None:
    lowerings.RULES.install(registry)
