"""What nkipy-ops-base leaves on CPU on purpose, and why (``RuleSet.stays_on_cpu``).

These reasons replace "no installed pack lowers it" in fallback warnings and strict-mode
errors, and ``nkipy-ops list --coverage`` lists them. The same list, per OpInfo, is what
``tests/ops_base/test_opinfo_sweep.py`` expects to fail in strict mode; a test keeps the two in
step. Functionalized graphs hold no ``.out`` overloads, so only the others are named.
"""

import torch

from .rules import RULES

aten = torch.ops.aten

_STORAGE_OFFSET = (
    "with an explicit storage_offset on a graph input: the offset counts from the input's "
    "storage, whose own offset dynamo does not guard, so a kernel could read the wrong elements "
    "on a later call"
)

for _op in (aten.as_strided.default, aten.as_strided_copy.default, aten.as_strided_scatter.default):
    RULES.stays_on_cpu(_op, _STORAGE_OFFSET)
RULES.stays_on_cpu(
    aten._to_copy.default,
    "to complex32 (chalf): the IR carries complex64/complex128 as pairs of f32/f64 and has no "
    "pair of f16",
)
RULES.stays_on_cpu(
    aten.hash_tensor.default, "it hashes the bit pattern of each value, and the IR has no bitcast"
)
RULES.stays_on_cpu(
    aten.igamma.default,
    "torch's series and continued fraction take up to 2000 data-dependent steps; no static "
    "bound is lowered yet",
)
RULES.stays_on_cpu(aten.igammac.default, "as igamma: up to 2000 data-dependent steps")
RULES.stays_on_cpu(
    aten.linalg_eig.default,
    "a general (non-symmetric) eigensolver with complex results is not lowered; symmetric "
    "matrices can use linalg.eigh, which is",
)
for _op in (
    aten.linalg_ldl_factor_ex.default,
    aten.linalg_ldl_factor.default,
    aten.linalg_ldl_solve.default,
):
    RULES.stays_on_cpu(_op, "Bunch-Kaufman LDL^T is not lowered")
RULES.stays_on_cpu(
    aten._scaled_mm.default,
    "fp8 operands: the IR has no fp8 element types, so they cannot enter a kernel",
)
