"""Shared ``RuleSet`` of this pack; each ``lowerings_*`` module adds its rules to it."""

from nkipy_core import RuleSet

RULES = RuleSet()

# Importing the modules registers their rules.
from . import lowerings_elementwise  # noqa: E402,F401
