"""A rank killed mid-job never hangs the others: the survivor raises a typed error in time.

Rank 1 of two kills itself (SIGKILL) during eager collectives, inside a kernel that holds a
collective, and while compiling a kernel whose compile lock rank 0 waits on
(``rank_failure_worker.py``). Rank 0 must raise ``CollectiveError`` naming the collective and
the rank it waited for, within the group's timeout, and then end cleanly: destroying the group
is quick and the process exits with the error (exit code 1), not a signal.

Why one torchrun per rank (``torchrun_per_rank``): a single torchrun that sees one of its ranks
die terminates the others at once (SIGTERM), which would hide whether they hang. A job over
several hosts has one torchrun per host, and a host whose ranks are alive does not learn of
another host's dead rank: its ranks run on into the collective. Two single-rank torchruns on
this host give exactly that, and each reports its rank's own exit code.

The time to error is measured from rank 1's last moment (it writes the time just before
killing itself) to rank 0's exception (it writes the time in its ``except``), and printed.
"""

from __future__ import annotations

import json
import re

import pytest
import rank_failure_worker
from rank_failure_worker import TIMEOUT
from torchrun import torchrun_per_rank

WORKER = rank_failure_worker.__file__
#: a hard bound on one launch (two torchruns and their ranks); far above the group's timeout
LAUNCH_SECONDS = 150
#: destroying a group whose peer died must not wait for the peer
DESTROY_SECONDS = 2.0

#: case: (backend of the default group, what the survivor's message must say). A kernel's
#: collectives run through the default group: on ``nkipy`` the group raises, on ``gloo`` the
#: cpu runtime turns gloo's error into ``CollectiveError``.
CASES = {
    "eager_mid_loop": ("nkipy", ["nkipy all_reduce", "lost the connection to rank 1"]),
    "eager_never_enters": ("nkipy", ["nkipy all_reduce", "lost the connection to rank 1"]),
    "kernel": ("nkipy", ["nkipy all_reduce", "lost the connection to rank 1"]),
    "compile_lock": ("gloo", ["all_reduce inside a kernel", "waiting for ranks [1]"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_survivor_raises_a_typed_error_in_time_and_exits_cleanly(case, tmp_path):
    backend, says = CASES[case]
    (survivor, survivor_log), (killed, killed_log) = torchrun_per_rank(
        WORKER,
        case,
        backend,
        str(tmp_path),
        logs=tmp_path,
        timeout=LAUNCH_SECONDS,
        env={"NKIPY_CACHE_LOCK_TIMEOUT": str(TIMEOUT.total_seconds()), "NKIPY_RUNTIME": None},
    )
    logs = f"rank 0:\n{survivor_log[-4000:]}\nrank 1:\n{killed_log[-2000:]}"
    assert (tmp_path / "killed.json").exists(), f"rank 1 did not get to its death\n{logs}"
    assert (tmp_path / "survivor.json").exists(), f"rank 0 did not raise\n{logs}"
    result = json.loads((tmp_path / "survivor.json").read_text())
    killed_at = json.loads((tmp_path / "killed.json").read_text())["at"]
    seconds = result["raised_at"] - killed_at
    print(f"{case}: rank 0 raised {result['type'][0]} {seconds:.3f} s after rank 1 died")

    assert "CollectiveError" in result["type"], result
    for words in [*says, "restart the job"]:
        assert words in result["message"], result["message"]
    assert "RuntimeError" in result["cause"], result  # gloo's own error, kept as the cause
    assert 0 <= seconds < TIMEOUT.total_seconds(), f"{case}: {seconds:.3f} s\n{logs}"
    assert result["destroy_seconds"] < DESTROY_SECONDS, result
    assert _exit_codes(survivor_log) == [1], logs  # the error, uncaught: no abort, no signal
    assert _exit_codes(killed_log) == [-9], logs
    assert (survivor, killed) == (1, 1), logs  # each torchrun reports its rank's failure
    if case == "compile_lock":  # rank 0 waited on rank 1's lock, then compiled the kernel itself
        stats = result["stats"]
        assert stats["compile_lock_waits"] == 1 and stats["compiled_kernels"] == 1, stats
        assert "waited_for_other_process" not in stats, stats


def _exit_codes(log: str) -> list[int]:
    """The exit codes torchrun reports for its ranks' failures (a signal as its negative)."""
    return [int(code) for code in re.findall(r"exitcode\s+:\s*(-?\d+)", log)]
