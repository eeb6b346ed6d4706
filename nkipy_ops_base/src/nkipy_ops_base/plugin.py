"""Plugin module of nkipy-ops-base: installs every rule module's ``rules``."""

from nkipy_core import hookimpl

from . import rules


@hookimpl
def nkipy_register_lowerings(registry) -> None:
    rules.RULES.install(registry)
