"""NRT status codes as typed errors.

libnrt returns an ``NRT_STATUS`` integer from almost every call. A bare number means nothing to a
user, so each failing call becomes an ``NrtError`` carrying the call, the status name and number,
and what to do next. The values are those of ``nrt_status.h`` in aws-neuron/aws-neuron-sdk
(src/libnrt/include/nrt/nrt_status.h); a number not in the table is reported as ``NRT_UNKNOWN``.
"""

from __future__ import annotations

from nkipy_core.errors import NkipyError

#: NRT_STATUS values, from nrt_status.h (8 is unused there)
STATUS_NAMES: dict[int, str] = {
    0: "NRT_SUCCESS",
    1: "NRT_FAILURE",
    2: "NRT_INVALID",
    3: "NRT_INVALID_HANDLE",
    4: "NRT_RESOURCE",
    5: "NRT_TIMEOUT",
    6: "NRT_HW_ERROR",
    7: "NRT_QUEUE_FULL",
    9: "NRT_LOAD_NOT_ENOUGH_NC",
    10: "NRT_UNSUPPORTED_NEFF_VERSION",
    11: "NRT_FAIL_HOST_MEM_ALLOC",
    13: "NRT_UNINITIALIZED",
    14: "NRT_CLOSED",
    15: "NRT_QUEUE_EMPTY",
    101: "NRT_EXEC_UNIT_DISABLED",
    1002: "NRT_EXEC_BAD_INPUT",
    1003: "NRT_EXEC_COMPLETED_WITH_NUM_ERR",
    1004: "NRT_EXEC_COMPLETED_WITH_ERR",
    1005: "NRT_EXEC_NC_BUSY",
    1006: "NRT_EXEC_OOB",
    1100: "NRT_COLL_PENDING",
    1200: "NRT_EXEC_HW_ERR_COLLECTIVES",
    1201: "NRT_EXEC_HW_ERR_HBM_UE",
    1202: "NRT_EXEC_HW_ERR_NC_UE",
    1203: "NRT_EXEC_HW_ERR_DMA_ABORT",
    1204: "NRT_EXEC_SW_NQ_OVERFLOW",
    1205: "NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE",
    1206: "NRT_NETWORK_PROXY_FAILURE",
}

_DEFAULT_ADVICE = "see the Neuron Runtime log (NEURON_RT_LOG_LEVEL=INFO) for the cause"

# What a user can do about the statuses they are likely to meet; the rest get the default.
_ADVICE: dict[int, str] = {
    2: "the NEFF or a tensor does not match what the call expects (name, size or offset); "
    "recompile the kernel (clear its cache entry) and check the runtime log",
    4: "device memory or queues are exhausted; free tensors, run fewer models per core, or use a larger instance",
    5: "the operation timed out; check `neuron-top` for a hung core and rerun",
    6: "the hardware reported a failure; run `neuron-ls`, and replace the instance if it persists",
    9: "fewer NeuronCores are free than the NEFF needs; check NEURON_RT_VISIBLE_CORES and other "
    "processes holding cores (`neuron-ls`)",
    10: "the NEFF was built by a neuronx-cc that this libnrt does not support; upgrade the Neuron SDK "
    "or recompile with a matching compiler",
    13: "libnrt was used before nrt_init; this is a bug in nkipy, please report it",
    14: "libnrt was used after nrt_close (at interpreter exit); keep device work out of atexit handlers",
    1002: "the inputs given to nrt_execute do not match the NEFF's; recompile the kernel",
    1003: "the kernel produced NaN or Inf; check the model's numerics",
    1005: "another process or model holds this NeuronCore; give each process its own cores "
    "with NEURON_RT_VISIBLE_CORES",
}


class NrtError(NkipyError, RuntimeError):
    """A libnrt call returned a status other than ``NRT_SUCCESS``."""

    def __init__(self, call: str, status: int, detail: str = ""):
        self.call = call
        self.status = status
        self.name = STATUS_NAMES.get(status, "NRT_UNKNOWN")
        what = f" ({detail})" if detail else ""
        super().__init__(
            f"{call} failed{what}: {self.name} ({status}): {_ADVICE.get(status, _DEFAULT_ADVICE)}"
        )


def check(call: str, status: int, detail: str = "") -> None:
    """Raise ``NrtError`` unless ``status`` is ``NRT_SUCCESS``."""
    if status != 0:
        raise NrtError(call, status, detail)
