"""The ``neuronx-cc`` driver: one ``HloModuleProto`` in, one NEFF out.

The command line is the one Neuron documents for compiling an XLA HLO graph
("How to generate a NEFF file")::

    neuronx-cc compile --framework XLA hlo_module.pb --target trn1 --output kernel.neff [args...]

followed by the user's ``additional_compiler_args``. Each compile runs in its own temporary
directory (the compiler writes scratch files into its working directory, and kernels compile in
parallel), in its own process group so that a timeout kills the compiler and every helper it
started, with stdout and stderr captured into one log that the caller keeps in the kernel's cache
entry. A failure keeps the directory (input, log, the exact command) so it can be reproduced.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import attrs

from nkipy_core import declare_env, env
from nkipy_core.errors import ConfigurationError, NkipyError, RuntimeUnavailableError

#: the instance families ``--target`` accepts from us (one NEFF per family: they do not load elsewhere)
TARGETS = ("trn1", "trn2", "trn3")
#: the EC2 instance type (``trn1.32xlarge``), as the hypervisor reports it; a local file read,
#: unlike the instance metadata service, which needs the network and can block
DMI_PRODUCT_NAME = Path("/sys/devices/virtual/dmi/id/product_name")
#: environment variables: the compiler to run instead of ``neuronx-cc`` on PATH, and the timeout
COMPILER_ENV = "NKIPY_NEURONX_CC"
TIMEOUT_ENV = "NKIPY_NEURONX_CC_TIMEOUT"
#: one kernel of a large model can take tens of minutes; an hour means "stuck", not "slow"
DEFAULT_TIMEOUT = 3600.0
declare_env(
    COMPILER_ENV,
    kind="file",
    meaning="The `neuronx-cc` executable to run; unset: `neuronx-cc` on `PATH`.",
    owner="nkipy-runtime",
)
declare_env(
    TIMEOUT_ENV,
    kind="seconds",
    default=DEFAULT_TIMEOUT,
    meaning="How long one `neuronx-cc` compile may run before it is killed and reported.",
    owner="nkipy-runtime",
)
#: lines of the compiler's log an error message quotes
LOG_TAIL_LINES = 20


class NeuronCompilerError(NkipyError):
    """``neuronx-cc`` failed or timed out on a kernel; the message quotes the command and the log's end."""

    def __init__(
        self,
        what: str,
        command: tuple[str, ...],
        returncode: int | None,
        log_tail: str,
        log_path: Path,
    ):
        self.command = command
        self.returncode = returncode
        self.log_tail = log_tail
        self.log_path = log_path
        super().__init__(
            f"neuronx-cc {what}.\ncommand: {shlex.join(command)}\nlast lines of its log:\n{log_tail}\n"
            f"The full log, the input and the output directory are kept in {log_path.parent}; run the "
            "command there to reproduce. Check the target and additional_compiler_args, or report the "
            "log to the Neuron SDK if the HLO is valid."
        )


@attrs.frozen
class NeffBuild:
    """What one compile produced: the NEFF, the compiler's log, the exact command and its duration."""

    neff: bytes
    log: str
    command: tuple[str, ...] = attrs.field(converter=tuple)
    seconds: float


def compiler_path() -> str | None:
    """``$NKIPY_NEURONX_CC`` if set, else ``neuronx-cc`` on PATH, else ``None``."""
    return env(COMPILER_ENV) or shutil.which("neuronx-cc")


def detect_target() -> str | None:
    """The target family of the instance this process runs on (``trn1n.32xlarge`` -> ``trn1``),
    or ``None`` off Trainium (a build box, a laptop, a container without DMI)."""
    try:
        product = DMI_PRODUCT_NAME.read_text().strip()
    except OSError:
        return None
    match = re.match(r"(trn\d)", product)
    return match.group(1) if match and match.group(1) in TARGETS else None


def resolve_target(configured: str | None) -> str:
    """The configured target, else the detected one; else a ``ConfigurationError``.

    There is deliberately no default: a NEFF built for the wrong family does not load, and
    ahead-of-time compiles run exactly where detection finds nothing, so a guessed default would
    fill the cache with kernels the Trainium host can neither use nor find under its own key.
    """
    if configured is not None:
        if configured not in TARGETS:
            raise ConfigurationError(
                f"unknown neuronx-cc target {configured!r}; use one of {list(TARGETS)} (the instance "
                "family of the Trainium host that will run the kernels)"
            )
        return configured
    detected = detect_target()
    if detected is None:
        raise ConfigurationError(
            f"cannot tell which Trainium generation to compile for: this is not a Trainium instance "
            f"({DMI_PRODUCT_NAME} names none). Set init_nkipy_backend(target=...) or NKIPY_TARGET to "
            f"one of {list(TARGETS)}, the family of the host that will run the kernels."
        )
    return detected


def timeout_seconds() -> float:
    """``$NKIPY_NEURONX_CC_TIMEOUT`` (seconds), else ``DEFAULT_TIMEOUT``."""
    return env(TIMEOUT_ENV)


def _tail(log: str) -> str:
    return "\n".join(log.splitlines()[-LOG_TAIL_LINES:]) or "(the log is empty)"


def compile_neff(
    hlo_module_proto: bytes, *, target: str, extra_args: str = "", timeout: float
) -> NeffBuild:
    """Compile one serialized ``HloModuleProto`` to a NEFF for ``target``."""
    compiler = compiler_path()
    if compiler is None:
        raise RuntimeUnavailableError(
            "neuronx-cc was not found on PATH (nor named by NKIPY_NEURONX_CC); install the Neuron SDK "
            "compiler (pip install neuronx-cc from the Neuron pip repository) or activate its environment"
        )
    workdir = Path(tempfile.mkdtemp(prefix="nkipy-neuronx-cc-"))
    hlo, neff, log_path = (
        workdir / "hlo_module.pb",
        workdir / "kernel.neff",
        workdir / "neuronx-cc.log",
    )
    hlo.write_bytes(hlo_module_proto)
    command = (
        compiler,
        "compile",
        "--framework",
        "XLA",
        str(hlo),
        "--target",
        target,
        "--output",
        str(neff),
        *shlex.split(extra_args),
    )
    start = time.monotonic()
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            log = log_path.read_text(errors="replace")
            raise NeuronCompilerError(
                f"timed out after {timeout:g} s", command, None, _tail(log), log_path
            ) from None
    seconds = time.monotonic() - start
    log = log_path.read_text(errors="replace")
    if returncode != 0:
        raise NeuronCompilerError(
            f"failed with exit code {returncode}", command, returncode, _tail(log), log_path
        )
    if not neff.is_file():
        raise NeuronCompilerError(
            "exited with 0 but wrote no NEFF", command, returncode, _tail(log), log_path
        )
    build = NeffBuild(neff.read_bytes(), log, command, seconds)
    shutil.rmtree(workdir, ignore_errors=True)
    return build
