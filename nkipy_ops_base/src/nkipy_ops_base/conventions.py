"""ATen's argument conventions turned into what ``knp`` takes, and declining a node.

ATen spells "every dimension" as ``dim=None`` or ``dim=[]`` and lets dims be negative; rules
call ``axes`` so that each op does not re-derive this. ``require`` is how a rule declines a
node it cannot lower: the node then runs on CPU, with the reason in the fallback warning.
"""

from __future__ import annotations

from collections.abc import Sequence

from nkipy_core import Unsupported


def axes(dim: int | Sequence[int] | None, rank: int) -> tuple[int, ...]:
    """An ATen ``dim`` argument as sorted non-negative axes; ``None`` and ``[]`` mean all axes."""
    if rank == 0:
        return ()
    if dim is None or (not isinstance(dim, int) and len(dim) == 0):
        return tuple(range(rank))
    items = (dim,) if isinstance(dim, int) else dim
    return tuple(sorted({d % rank for d in items}))


def inverse_permutation(perm: Sequence[int]) -> list[int]:
    """The permutation that undoes ``transpose(x, perm)``."""
    return [list(perm).index(i) for i in range(len(perm))]


def require(condition: bool, reason: str) -> None:
    """Decline the node (it then falls back to CPU) unless ``condition`` holds."""
    if not condition:
        raise Unsupported(reason)
