"""``python -m nkipy_runtime.neuron.audit CACHE --target trn1``: the Neuron profile violations of
every kernel in a kernel cache, counted by rule, opcode and type.

Kernels compiled for ``nrt`` were checked when they were compiled; this reads any cache (one
filled on ``xla``, or by an older nkipy) and says what a target would refuse, without a compiler.
A cache filled on ``xla`` holds modules emitted for 64-bit integers, so a 32-bit-integer audit
of it also counts the 64-bit identities that ``nrt`` emits as 32-bit ones for such a target.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from nkipy_runtime.hlo_files import HLO_TEXT

from .check import violations
from .profile import NeuronProfile


def audit(cache: Path, profile: NeuronProfile) -> tuple[int, int, collections.Counter]:
    """(modules read, modules with a violation, violations by (rule, opcode, type))."""
    modules = bad = 0
    counts: collections.Counter = collections.Counter()
    for text in sorted(cache.glob(f"kernels/*/artifacts/{HLO_TEXT}")):
        modules += 1
        found = violations(text.read_text(), profile)
        bad += bool(found)
        counts.update((v.rule.name, v.opcode, v.dtype) for v in found)
    return modules, bad, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nkipy_runtime.neuron.audit")
    parser.add_argument("cache", type=Path, help="a kernel cache directory (NKIPY_CACHE)")
    parser.add_argument("--target", required=True, choices=["trn1", "trn2", "trn3"])
    parser.add_argument("--int64", choices=["native", "32"], default=None)
    args = parser.parse_args(argv)
    native = (args.int64 or ("32" if args.target == "trn1" else "native")) == "native"
    if args.target == "trn1" and native:
        parser.error("trn1 has no 64-bit integers: --int64 native is for trn2 and trn3")
    profile = NeuronProfile(args.target, native_int64=native)
    modules, bad, counts = audit(args.cache, profile)
    print(
        f"{profile.name}: {sum(counts.values())} violating instruction(s) in {bad} of "
        f"{modules} module(s)"
    )
    for (rule, opcode, dtype), n in counts.most_common():
        print(f"  {n:5d}  {rule:24s} {opcode} on {dtype}")
    return 1 if counts else 0


if __name__ == "__main__":
    raise SystemExit(main())
