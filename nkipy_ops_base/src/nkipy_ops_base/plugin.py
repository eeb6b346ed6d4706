"""Plugin module of nkipy-ops-base: installs every rule module's ``rules``."""

from nkipy_core import hookimpl

from . import rules

#: the nkipy hook API versions this pack works with (nkipy_core.plugin.hook_api)
NKIPY_HOOK_API = ">=1.0,<2"


@hookimpl
def nkipy_register_lowerings(registry) -> None:
    rules.RULES.install(registry)
