"""A rank killed mid-job never hangs the others: the survivor raises a typed error in time.

Rank 1 of two kills itself (SIGKILL) during eager collectives, inside a kernel that holds a
collective, and while compiling a kernel whose compile lock rank 0 waits on
(``rank_failure_worker.py``). Rank 0 must raise ``CollectiveError`` naming the collective and
the rank it waited for, within the group's timeout, and then end cleanly: destroying the group
is quick, and the process exits with the error (exit code 1), not a hang or a signal, whether it
destroyed the group or left it to the interpreter's exit.

Why one torchrun per rank (``torchrun_per_rank``): a single torchrun that sees one of its ranks
die terminates the others at once (SIGTERM), which would hide whether they hang. A job over
several hosts has one torchrun per host, and a host whose ranks are alive does not learn of
another host's dead rank: its ranks run on into the collective. Two single-rank torchruns on
this host give exactly that, and each reports its rank's own exit code.

The time to error is measured from rank 1's last moment (it writes the time just before
killing itself) to rank 0's exception (it writes the time in its ``except``), and printed.

The message for each way gloo fails (a lost peer, a late one), and sends and receives that gloo
refuses to start, are checked in this process, without ranks.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import rank_failure_worker
import torch
from rank_failure_worker import TIMEOUT
from torchrun import torchrun_per_rank

from nkipy_core.errors import CollectiveError
from nkipy_ops_collectives.p2p import PointToPoint
from nkipy_ops_collectives.work import Wait

WORKER = rank_failure_worker.__file__
#: a hard bound on one launch (two torchruns and their ranks); far above the group's timeout
LAUNCH_SECONDS = 150
#: destroying a group whose peer died must not wait for the peer
DESTROY_SECONDS = 2.0

#: case: (backend of the default group, how rank 0 ends, what its message must say). A kernel's
#: collectives run through the default group: on ``nkipy`` the group raises ``CollectiveError``,
#: on ``gloo`` the cpu runtime turns gloo's error into one; the compile case runs on ``gloo`` so
#: that both are covered. Rank 0 either destroys the group or leaves it to the interpreter's exit.
CASES = {
    "eager_mid_loop": ("nkipy", "destroy", ["nkipy all_reduce", "lost the connection to rank 1"]),
    "eager_never_enters": ("nkipy", "exit", ["nkipy all_reduce", "lost the connection to rank 1"]),
    "kernel": ("nkipy", "destroy", ["nkipy all_reduce", "lost the connection to rank 1"]),
    "compile_lock": ("gloo", "exit", ["all_reduce inside a kernel", "waiting for ranks [1]"]),
}


@pytest.fixture(scope="module")
def launches(tmp_path_factory) -> dict[str, tuple[Path, list[tuple[int, str]]]]:
    """Every case's launch, all at once: each spends most of its time importing torch in four
    processes, so together they finish sooner than one after the other. Per case, its output
    directory and each torchrun's exit code and output."""
    dirs = {case: tmp_path_factory.mktemp(case) for case in CASES}

    def launch(case: str) -> list[tuple[int, str]]:
        return torchrun_per_rank(
            WORKER,
            case,
            *CASES[case][:2],
            str(dirs[case]),
            logs=dirs[case],
            timeout=LAUNCH_SECONDS,
            env={"NKIPY_CACHE_LOCK_TIMEOUT": str(TIMEOUT.total_seconds()), "NKIPY_RUNTIME": None},
        )

    with ThreadPoolExecutor(len(CASES)) as pool:
        runs = dict(zip(CASES, pool.map(launch, CASES)))
    return {case: (dirs[case], runs[case]) for case in CASES}


@pytest.mark.parametrize("case", list(CASES))
def test_survivor_raises_a_typed_error_in_time_and_exits_cleanly(case, launches):
    out, ((survivor, survivor_log), (killed, killed_log)) = launches[case]
    teardown, says = CASES[case][1:]
    logs = f"rank 0:\n{survivor_log[-4000:]}\nrank 1:\n{killed_log[-2000:]}"
    assert (out / "killed.json").exists(), f"rank 1 did not get to its death\n{logs}"
    assert (out / "survivor.json").exists(), f"rank 0 did not raise\n{logs}"
    result = json.loads((out / "survivor.json").read_text())
    killed_at = json.loads((out / "killed.json").read_text())["at"]
    seconds = result["raised_at"] - killed_at
    destroy = result.get("destroy_seconds")
    print(
        f"{case}: rank 0 raised {result['type'][0]} {seconds:.3f} s after rank 1 died; "
        + (f"destroy_process_group took {destroy:.6f} s" if destroy is not None else "no destroy")
    )

    assert "CollectiveError" in result["type"], result
    for words in [*says, "restart the job"]:
        assert words in result["message"], result["message"]
    assert "RuntimeError" in result["cause"], result  # gloo's own error, kept as the cause
    assert 0 <= seconds < TIMEOUT.total_seconds(), f"{case}: {seconds:.3f} s\n{logs}"
    if teardown == "destroy":
        assert result["destroy_seconds"] < DESTROY_SECONDS, result
    assert _exit_codes(survivor_log) == [1], logs  # the error, uncaught: no hang, no abort
    assert _exit_codes(killed_log) == [-9], logs
    assert (survivor, killed) == (1, 1), logs  # each torchrun reports its rank's failure
    if case == "compile_lock":  # rank 0 waited on rank 1's lock, then compiled the kernel itself
        stats = result["stats"]
        assert stats["compile_lock_waits"] == 1 and stats["compiled_kernels"] == 1, stats
        assert "waited_for_other_process" not in stats, stats


def _exit_codes(log: str) -> list[int]:
    """The exit codes torchrun reports for its ranks' failures (a signal as its negative)."""
    return [int(code) for code in re.findall(r"exitcode\s+:\s*(-?\d+)", log)]


#: what gloo says (its messages as torch 2.x raises them) when a peer is gone, and when it is late
LOST = "[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:24978"
RESET = "[gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:4311: Connection reset by peer"
LATE = "[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms for recv operation"


@pytest.mark.parametrize(
    ("gloo", "says"),
    [
        (LOST, ["nkipy all_reduce: lost the connection to rank 1", "restart the job"]),
        (RESET, ["nkipy all_reduce: lost the connection to rank 1", "restart the job"]),
        (LATE, ["rank 1 of the group did not take part within the group's timeout (0:00:10"]),
        ("gloo: unsupported", ["nkipy all_reduce failed on this rank while waiting for rank 1"]),
    ],
)
def test_a_failed_wait_names_the_collective_the_rank_and_what_to_do(gloo, says):
    error = Wait("all_reduce", (1,), TIMEOUT).failed(RuntimeError(gloo))
    assert isinstance(error, CollectiveError)
    assert isinstance(error.__cause__, RuntimeError) and gloo in str(error)
    for words in says:
        assert words in str(error)


class _GoneGloo:
    """A gloo group whose peer is gone: gloo raises as a send or receive starts."""

    def send(self, *args):
        raise RuntimeError(LOST)

    recv = send


@pytest.mark.parametrize("start", ["isend", "irecv"])
def test_send_and_recv_to_a_gone_peer_raise_collective_error(start):
    p2p = PointToPoint(TIMEOUT)
    with pytest.raises(CollectiveError, match="lost the connection to rank 1") as raised:
        getattr(p2p, start)(_GoneGloo(), torch.ones(2), 1, 0)
    assert isinstance(raised.value.__cause__, RuntimeError)
