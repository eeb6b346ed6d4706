"""Shared ``RuleSet`` of this pack; each ``lowerings_*`` module adds its rules to it when
imported (the plugin module imports them all)."""

from nkipy_core import RuleSet

RULES = RuleSet()
