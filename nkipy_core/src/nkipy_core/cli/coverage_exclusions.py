"""Core ATen overloads no static-shape kernel can lower, and why: what ``nkipy-ops list
--coverage core-aten`` reports as *excluded* rather than *missing*.

The coverage report distinguishes work left to do (``missing``: a pack could lower it) from
overloads that are outside what a kernel is, whichever pack is installed. Each exclusion names
its category, so that a reader can check the reason instead of trusting a list; an excluded op
that some installed pack does lower anyway counts as covered.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Exclusion:
    """One overload that is not lowered by design, and the reason a user reads."""

    op: str
    reason: str


SYMBOLIC_SIZE_QUERY = (
    "symbolic-size query: answered when a graph is specialised on concrete sizes, never in a kernel"
)
DATA_DEPENDENT_SHAPE = "data-dependent output shape: its size depends on the values, which a static kernel cannot express"
HOST_SCALAR = "data-dependent host value: `.item()` hands a tensor element to Python on the host"
STORAGE_RESIZE = "in-place storage resize: mutates a tensor's size at run time; functionalized graphs never hold it"

CORE_ATEN_EXCLUSIONS: tuple[Exclusion, ...] = (
    *(
        Exclusion(op, SYMBOLIC_SIZE_QUERY)
        for op in (
            "aten::sym_is_contiguous.default",
            "aten::sym_numel.default",
            "aten::sym_size.int",
            "aten::sym_storage_offset.default",
            "aten::sym_stride.int",
        )
    ),
    Exclusion("aten::nonzero.default", DATA_DEPENDENT_SHAPE),
    Exclusion("aten::_local_scalar_dense.default", HOST_SCALAR),
    Exclusion("aten::resize_.default", STORAGE_RESIZE),
)

#: opset name -> its exclusions
EXCLUSIONS: dict[str, tuple[Exclusion, ...]] = {"core-aten": CORE_ATEN_EXCLUSIONS}
