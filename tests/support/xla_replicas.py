"""Run StableHLO with several replicas on XLA's CPU, in a child process.

XLA's CPU client shows N devices only if ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
is set before jax creates it, which may already have happened in the test process; so the
replicas run in a spawned child that sets the flag first. ``ReplicaPool`` keeps one child for a
whole test module.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from collections.abc import Sequence

import numpy as np

#: replicas the child's CPU client has, the most any test uses
DEVICES = 4
#: seconds one module may take to compile and run, so a stuck child fails the test, not CI
TIMEOUT = 120


def _initialize() -> None:
    os.environ["XLA_FLAGS"] = (
        f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}"
    )


def _run(stablehlo: str, inputs: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
    from nkipy_runtime import xla_bridge

    devices = xla_bridge.devices("cpu")[: len(inputs)]
    assert len(devices) == len(inputs), (
        f"the child sees {len(devices)} CPU devices, not {len(inputs)}"
    )
    executable = xla_bridge.compile_replicated(stablehlo, devices)
    return xla_bridge.execute_replicated(executable, devices, inputs)


class ReplicaPool:
    """One spawned child that runs replicated modules: ``run(text, inputs)`` where ``inputs[i]``
    are replica i's arguments, giving each replica's outputs."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_initialize
        )

    def run(self, stablehlo: str, inputs: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
        return self._pool.submit(_run, stablehlo, inputs).result(timeout=TIMEOUT)

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)
