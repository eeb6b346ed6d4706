"""Shared ``RuleSet`` of this pack; each ``lowerings_*`` module adds its rules to it."""

from nkipy_core import RuleSet

RULES = RuleSet()

# Importing the modules registers their rules.
from . import (  # noqa: E402,F401
    lowerings_conv,
    lowerings_creation,
    lowerings_elementwise,
    lowerings_embedding_bag,
    lowerings_grid_sample,
    lowerings_indexing,
    lowerings_linalg,
    lowerings_nn,
    lowerings_random,
    lowerings_reduction,
    lowerings_scan,
    lowerings_shape,
    lowerings_sorting,
    lowerings_spatial,
    lowerings_special,
)
