"""The ``nkipy`` device's random-number generator: a Philox seed and offset, like CUDA's.

Kernels draw random numbers with Philox4x32-10 (the ``random_bits`` primitive) from a key and a
counter. For random ops that produce device tensors, compiled or eager, the key is this
generator's seed and the counter starts at its offset; each call moves the offset past what it
may draw (``nkipy_core.compiler.rng`` says how far). So the state is two numbers, and reading,
saving and restoring it (``torch.nkipy.get_rng_state`` / ``set_rng_state``) replays the same
numbers on the device.

The state is laid out as CUDA's Philox generator lays out its own (``torch.cuda.get_rng_state()``):
16 bytes, the seed (u64) then the offset (i64), little-endian, the offset counting 32-bit values
and staying a multiple of 4 (one Philox block). Code written against that layout works on the
device unchanged: DTensor's ``OffsetBasedRNGTracker`` moves the offset so that each shard draws
its own part of one stream, then moves it past the whole tensor.

The generator sits below the compiler, which draws from it at every call of a random kernel, and
below the device, whose ``torch.nkipy`` functions read and set it (``torch.manual_seed`` seeds it
through ``torch.nkipy.manual_seed_all``, also in programs that never use the device). It imports
nothing of nkipy and nothing heavy.
"""

from __future__ import annotations

import os
import threading

import torch

from nkipy_core.errors import DeviceError

#: torch's default seed (``c10::default_rng_seed_val``), where every torch generator starts
DEFAULT_SEED = 67280421310721
#: bytes of a state: the seed, then the offset
STATE_BYTES = 16
_U64 = (1 << 64) - 1


def _seed_value(seed: int) -> int:
    """A seed as torch takes one: any int in ``[-2**63, 2**64)``, a negative one remapped to
    ``0xffff_ffff_ffff_ffff + seed`` as ``torch.manual_seed`` documents."""
    seed = int(seed)
    if not -(1 << 63) <= seed <= _U64:
        raise DeviceError(
            f"seed {seed} is out of range: torch seeds are integers in [-2**63, 2**64); pass one "
            "in that range"
        )
    return _U64 + seed if seed < 0 else seed


class PhiloxGenerator:
    """One device's generator: its seed, the offset of the next value it gives, and the seed it
    started with (``initial_seed``). Thread-safe: two threads' calls never get the same values."""

    __slots__ = ("_seed", "_offset", "_lock")

    def __init__(self, seed: int = DEFAULT_SEED) -> None:
        self._seed, self._offset = _seed_value(seed), 0
        self._lock = threading.Lock()

    def manual_seed(self, seed: int) -> None:
        """Start again from ``seed``, at offset 0."""
        value = _seed_value(seed)
        with self._lock:
            self._seed, self._offset = value, 0

    def seed(self) -> int:
        """Seed with a non-deterministic 64-bit number, as ``torch.cuda.seed()`` does; return it."""
        value = int.from_bytes(os.urandom(8), "little")
        self.manual_seed(value)
        return value

    def initial_seed(self) -> int:
        return self._seed

    @property
    def offset(self) -> int:
        return self._offset

    def take(self, values: int) -> tuple[int, int]:
        """The seed and the offset a call draws at, moving the offset past ``values`` values
        (rounded up to a whole Philox block; it wraps at 2**64, as the counter does)."""
        step = -(-values // 4) * 4
        with self._lock:
            seed, offset = self._seed, self._offset
            self._offset = (offset + step) & _U64
        return seed, offset

    def get_state(self) -> torch.Tensor:
        """The state as a CPU ``uint8`` tensor of 16 bytes: seed, then offset (little-endian)."""
        with self._lock:
            raw = self._seed.to_bytes(8, "little") + self._offset.to_bytes(8, "little")
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8)

    def set_state(self, state: torch.Tensor) -> None:
        """Restore a state ``get_state`` gave (or one laid out as CUDA's Philox state is)."""
        if (
            not isinstance(state, torch.Tensor)
            or state.dtype != torch.uint8
            or state.numel() != STATE_BYTES
        ):
            got = (
                f"a {state.dtype} tensor of {state.numel()} elements"
                if isinstance(state, torch.Tensor)
                else type(state).__name__
            )
            raise DeviceError(
                f"the nkipy device's generator state is a uint8 tensor of {STATE_BYTES} bytes (the "
                f"Philox seed, then the offset), as torch.nkipy.get_rng_state() gives; got {got}. "
                "Pass a state saved from torch.nkipy.get_rng_state() (torch.get_rng_state() is the "
                "CPU generator's)."
            )
        raw = bytes(state.detach().cpu().reshape(-1).tolist())
        seed, offset = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")
        if offset % 4:
            raise DeviceError(
                f"the generator state's offset {offset} is not a multiple of 4: offsets count 32-bit "
                "values and move a whole Philox block (4 values) at a time. Round it up to a multiple "
                "of 4."
            )
        with self._lock:
            self._seed, self._offset = seed, offset


_lock = threading.Lock()
_generators: dict[int, PhiloxGenerator] = {}
#: the seed of generators made from now on: the last ``seed_all``'s, else torch's default
_seed_for_new = DEFAULT_SEED


def default(index: int) -> PhiloxGenerator:
    """The generator of device ``index`` (made on first use)."""
    found = _generators.get(index)
    if found is None:
        with _lock:
            found = _generators.setdefault(index, PhiloxGenerator(_seed_for_new))
    return found


def seed_all(seed: int) -> None:
    """Seed every device's generator, and those made later, with ``seed``."""
    global _seed_for_new
    value = _seed_value(seed)
    with _lock:
        _seed_for_new = value
        generators = list(_generators.values())
    for generator in generators:
        generator.manual_seed(value)
