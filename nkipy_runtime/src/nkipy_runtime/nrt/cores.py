"""Which NeuronCores a process may use: ``NEURON_RT_VISIBLE_CORES`` and the local rank.

libnrt reads ``NEURON_RT_VISIBLE_CORES`` once, in ``nrt_init``; a core is owned by one process,
so under ``torchrun`` each local rank must see its own cores before it initialises, or every rank
after the first fails with ``NRT_LOAD_NOT_ENOUGH_NC``/``NRT_EXEC_NC_BUSY``. The cores to share out
are the ones the user made visible, else all of the machine's; they are split into equal,
contiguous blocks among the local ranks (``LOCAL_RANK`` of ``LOCAL_WORLD_SIZE``, as torchrun sets
them). A single process keeps the user's setting untouched.
The Neuron Runtime documents the variable's forms: one core (``2``), a range (``0-3``) and a
list (``4,5,7``); a list of ranges (``0-1,4``) is accepted as well.
"""

from __future__ import annotations

from collections.abc import Mapping

from nkipy_core import env
from nkipy_core.errors import NkipyError

VISIBLE_CORES = "NEURON_RT_VISIBLE_CORES"


class CoreMappingError(NkipyError):
    """The visible-core setting is malformed or has too few cores for the local ranks."""


def parse_visible_cores(text: str) -> tuple[int, ...]:
    """The core indices named by a ``NEURON_RT_VISIBLE_CORES`` value, in the order given."""
    cores: list[int] = []
    for part in text.replace(" ", "").split(","):
        first, dash, last = part.partition("-")
        try:
            lo, hi = int(first), int(last) if dash else int(first)
        except ValueError:
            raise CoreMappingError(
                f"{VISIBLE_CORES}={text!r} is not a core list; write one core (2), a range (0-3) "
                "or a comma-separated list (4,5,7)"
            ) from None
        if lo < 0 or hi < lo:
            raise CoreMappingError(
                f"{VISIBLE_CORES}={text!r}: the range {part!r} is empty or negative"
            )
        cores.extend(range(lo, hi + 1))
    if len(set(cores)) != len(cores):
        raise CoreMappingError(f"{VISIBLE_CORES}={text!r} names a core twice")
    return tuple(cores)


def format_visible_cores(cores: tuple[int, ...]) -> str:
    """The shortest ``NEURON_RT_VISIBLE_CORES`` value for consecutive ``cores`` (``4-7``, ``2``)."""
    if len(cores) > 1 and cores == tuple(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


def cores_for_local_rank(
    cores: tuple[int, ...], local_rank: int, local_world_size: int
) -> tuple[int, ...]:
    """This local rank's share of ``cores``: an equal, contiguous block per rank."""
    if not 0 <= local_rank < local_world_size:
        raise CoreMappingError(
            f"LOCAL_RANK={local_rank} is outside LOCAL_WORLD_SIZE={local_world_size}; start the "
            "processes with torchrun, or set both variables consistently"
        )
    if len(cores) < local_world_size:
        raise CoreMappingError(
            f"{local_world_size} local ranks but only {len(cores)} visible NeuronCore(s) "
            f"({format_visible_cores(cores) or 'none'}): start at most one process per core "
            f"(torchrun --nproc-per-node), make more cores visible ({VISIBLE_CORES}), or use a larger instance"
        )
    per_rank = len(cores) // local_world_size
    return cores[local_rank * per_rank : (local_rank + 1) * per_rank]


def assign_visible_cores(total_cores: int, environ: Mapping[str, str] | None = None) -> str | None:
    """The ``NEURON_RT_VISIBLE_CORES`` value to set before ``nrt_init``, or None to leave it.

    ``total_cores`` is the machine's count (``nrt_get_total_nc_count``), used when the user made
    no choice. None for a single process whose user set the variable (validated here, so a typo
    fails with a clear message rather than inside libnrt).
    """
    local_rank = env("LOCAL_RANK", environ) or 0
    local_world_size = env("LOCAL_WORLD_SIZE", environ)
    user = env(VISIBLE_CORES, environ)
    cores = parse_visible_cores(user) if user is not None else tuple(range(total_cores))
    mine = cores_for_local_rank(cores, local_rank, local_world_size)
    if user is not None and local_world_size == 1:
        return None
    return format_visible_cores(mine)
