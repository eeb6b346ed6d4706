"""Plugin module of nkipy-ops-base: installs the rules every ``lowerings_*`` module adds to
``rules.RULES``."""

from nkipy_core import hookimpl

# Importing the modules registers their rules.
from . import (  # noqa: F401
    lowerings_bessel,
    lowerings_cholesky,
    lowerings_complex,
    lowerings_conv,
    lowerings_creation,
    lowerings_elementwise,
    lowerings_embedding_bag,
    lowerings_fft,
    lowerings_float_parts,
    lowerings_grid_sample,
    lowerings_histogram,
    lowerings_indexing,
    lowerings_integer,
    lowerings_linalg,
    lowerings_linear_cross_entropy,
    lowerings_lu,
    lowerings_matrix_exp,
    lowerings_nn,
    lowerings_normal,
    lowerings_orthogonal_polynomials,
    lowerings_qr,
    lowerings_random,
    lowerings_reduction,
    lowerings_scan,
    lowerings_segment,
    lowerings_shape,
    lowerings_sorting,
    lowerings_spatial,
    lowerings_special,
    lowerings_spectral,
    stays_on_cpu,
)
from .rules import RULES

#: the nkipy hook API versions this pack works with (nkipy_core.plugin.hook_api)
NKIPY_HOOK_API = ">=1.2,<2"  # registers complex=True rules (1.1) and CPU notes (1.2)


@hookimpl
def nkipy_register_lowerings(registry) -> None:
    RULES.install(registry)
