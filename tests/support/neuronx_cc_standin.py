"""A stand-in for ``neuronx-cc``, for tests only: THE REAL neuronx-cc IS NOT RUN by any test using it.

``install(directory)`` writes an executable named ``neuronx-cc`` that checks the argument
contract Neuron documents (``compile --framework XLA <file>.pb --target <t> --output <x>.neff
[extra...]``), writes a fake NEFF holding the SHA-256 of its input (so a test can compare it with
the HLO bytes the bridge produced) and appends a record of the call to a log. ``STANDIN_MODE``
makes it fail (exit 1 after writing a log), hang, or sleep ``STANDIN_SLEEP`` seconds first.
``STANDIN_NEFF`` names a file whose bytes it writes as the NEFF instead (e.g. one the stand-in
libnrt can "execute", to drive the whole nrt runtime in a test).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SCRIPT = '''#!{python}
"""Stand-in for neuronx-cc written by nkipy's tests. It is NOT the Neuron compiler: it checks the
documented argument contract and writes a fake NEFF; the real neuronx-cc was not run."""
import hashlib, json, os, sys, time

start = time.time()
args = sys.argv[1:]


def die(message):
    print("stand-in neuronx-cc: bad arguments: " + message + ": " + repr(args), file=sys.stderr)
    sys.exit(2)


if args[:3] != ["compile", "--framework", "XLA"]:
    die("expected 'compile --framework XLA' first")
if len(args) < 8 or not args[3].endswith(".pb"):
    die("expected the .pb input after --framework XLA")
if args[4] != "--target" or args[5] not in ("trn1", "trn2", "trn3"):
    die("expected --target trn1|trn2|trn3")
if args[6] != "--output" or not args[7].endswith(".neff"):
    die("expected --output <file>.neff")
data = open(args[3], "rb").read()
if not data:
    die("the .pb input is empty")
print("stand-in neuronx-cc: compiling " + args[3] + " for " + args[5])
for i in range(30):
    print("stand-in log line " + str(i))
sys.stdout.flush()
mode = os.environ.get("STANDIN_MODE", "ok")
if mode == "fail":
    print("ERROR: stand-in compile failure")
    sys.exit(1)
if mode == "hang":
    time.sleep(600)
if mode == "sleep":
    time.sleep(float(os.environ["STANDIN_SLEEP"]))
neff = {{"stand_in": True, "input_sha256": hashlib.sha256(data).hexdigest(), "target": args[5], "extra": args[8:]}}
with open(args[7], "w") as f:
    json.dump(neff, f)
if os.environ.get("STANDIN_NEFF"):
    with open(os.environ["STANDIN_NEFF"], "rb") as src, open(args[7], "wb") as dst:
        dst.write(src.read())
with open({calls!r}, "a") as f:
    f.write(json.dumps({{"argv": args, "start": start, "end": time.time()}}) + "\\n")
'''


def install(directory: Path) -> tuple[Path, Path]:
    """Write the stand-in as ``directory/neuronx-cc``; (its path, the path of its call log)."""
    directory.mkdir(parents=True, exist_ok=True)
    calls = directory / "calls.jsonl"
    path = directory / "neuronx-cc"
    path.write_text(SCRIPT.format(python=sys.executable, calls=str(calls)))
    path.chmod(0o755)
    return path, calls


def calls(log: Path) -> list[dict]:
    """The stand-in's calls so far, in order of completion."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
