"""Every environment variable nkipy reads, declared once: name, default, what it accepts, what it
means and which distribution owns it.

The table is the only place that reads ``os.environ`` for a variable nkipy knows (a test scans
the sources for any other read of an ``NKIPY_*`` name), so a value is parsed the same way
everywhere, and a bad one fails with a ``ConfigurationError`` that names the variable and what
it accepts instead of a ``ValueError`` somewhere deep. Values are read at each call (a test or a
launcher may set them late), never cached.

nkipy-core declares its variables here; a pack declares its own at import through
``nkipy_core.declare_env`` and reads them with ``nkipy_core.env``. Variables set by the launcher
(torchrun), torch or the Neuron runtime are declared too, as inputs nkipy only reads.
``docs/configuration.md`` is rendered from the table (``render``, run by
``docs/gen_configuration.py``).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from nkipy_core.errors import ConfigurationError

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

#: the distribution that owns nkipy-core's own variables
CORE = "nkipy-core"
#: owners of the variables nkipy only reads (``EnvVar.input_only``)
LAUNCHER = "launcher (torchrun)"
TORCH = "torch"
NEURON_RUNTIME = "Neuron runtime (libnrt)"


# The records are frozen dataclasses, not attrs classes: the hardware probe that torch runs in
# every program dynamo compiles reads a variable through this table, and must stay that light.


@dataclasses.dataclass(frozen=True)
class Kind(Generic[T_co]):
    """How a variable's text becomes a value: ``parse`` raises ``ValueError`` on text it does
    not take, and ``accepts`` says in words what it takes (for errors and the docs)."""

    name: str
    accepts: str
    parse: Callable[[str], T_co] = dataclasses.field(compare=False)


def _flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also refuses nan
        raise ValueError(text)
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


#: multiples of a byte a size may be written in (case does not matter)
_UNITS = {
    "": 1,
    "b": 1,
    **{f"{p}b": 1000 ** (i + 1) for i, p in enumerate("kmgt")},
    **{f"{p}ib": 1024 ** (i + 1) for i, p in enumerate("kmgt")},
}


def parse_bytes(text: str) -> int:
    """A size in bytes from ``"17179869184"``, ``"16GiB"``, ``"1.5 GB"`` (decimal units are
    powers of 1000, binary ones of 1024); ``ValueError`` for anything else, or below one byte."""
    number = text.strip().lower().rstrip("abgikmt ")
    unit = text.strip().lower()[len(number) :].replace(" ", "")
    if unit not in _UNITS:
        raise ValueError(text)
    value = int(float(number) * _UNITS[unit]) if "." in number else int(number) * _UNITS[unit]
    if value < 1:
        raise ValueError(text)
    return value


TEXT = Kind("text", "any text", str)
PATH = Kind("path", "a path", Path)
# kept as written: ``./tool`` and ``tool`` differ to ``subprocess`` and ``dlopen``
FILE = Kind("file", "a file's path", str)
FLAG = Kind("flag", "1, true, yes or on; 0, false, no or off", _flag)
SECONDS = Kind("seconds", "a number of seconds, at least 0 (e.g. 1800)", _seconds)
COUNT = Kind("count", "a whole number, at least 0", _count)
BYTES = Kind(
    "bytes",
    "a size in bytes, at least 1, bare or with a unit: 17179869184, 16GiB, 1.5GB",
    parse_bytes,
)
# torch's own rule for its switches: exactly "1" is on, anything else is off
TORCH_FLAG = Kind(
    "torch-flag", "1 (on); any other value is off, as torch reads it", lambda t: t == "1"
)

KINDS: dict[str, Kind[Any]] = {
    kind.name: kind for kind in (TEXT, PATH, FILE, FLAG, SECONDS, COUNT, BYTES, TORCH_FLAG)
}


@dataclasses.dataclass(frozen=True)
class EnvVar(Generic[T_co]):
    """One environment variable: the value of ``get()`` is ``default`` when the variable is
    unset or empty, else its text parsed by ``kind`` (``T_co`` includes ``None`` when the
    default is ``None``)."""

    name: str
    kind: Kind[T_co]
    default: T_co
    meaning: str
    owner: str
    #: set by the launcher, torch or the Neuron runtime; nkipy reads it and documents it, but
    #: does not define it
    input_only: bool = False

    def get(self, environ: Mapping[str, str] | None = None) -> T_co:
        """The value in ``environ`` (default: the process environment) now."""
        text = (os.environ if environ is None else environ).get(self.name)
        if not text:
            return self.default
        try:
            return self.kind.parse(text)
        except ValueError:
            raise ConfigurationError(
                f"{self.name}={text!r} is not valid: it accepts {self.kind.accepts}. "
                f"Fix it, or unset it for the default ({_shown(self.default)})."
            ) from None


_lock = threading.Lock()
_table: dict[str, EnvVar[Any]] = {}


def declare_env(
    name: str,
    *,
    kind: str,
    default: Any = None,
    meaning: str,
    owner: str,
    input_only: bool = False,
) -> EnvVar[Any]:
    """Declare an environment variable in nkipy's table and return it (``.get()`` reads it).

    ``kind`` is one of ``KINDS`` (``"text"``, ``"path"``, ``"file"``, ``"flag"``, ``"seconds"``,
    ``"count"``, ``"torch-flag"``); ``owner`` is the distribution that reads it (``"nkipy-runtime"``).
    Declaring the same variable again with the same record is a no-op (a module imported
    twice); with a different one it is a ``ConfigurationError``.
    """
    if kind not in KINDS:
        raise ConfigurationError(
            f"environment variable {name}: unknown kind {kind!r}; use one of {sorted(KINDS)}"
        )
    return _declare(
        name, kind=KINDS[kind], default=default, meaning=meaning, owner=owner, input_only=input_only
    )


@overload
def _declare(
    name: str,
    *,
    kind: Kind[T],
    default: T,
    meaning: str,
    owner: str,
    input_only: bool = False,
) -> EnvVar[T]: ...


@overload
def _declare(
    name: str,
    *,
    kind: Kind[T],
    default: None = None,
    meaning: str,
    owner: str,
    input_only: bool = False,
) -> EnvVar[T | None]: ...


def _declare(
    name: str,
    *,
    kind: Kind[Any],
    default: Any = None,
    meaning: str,
    owner: str,
    input_only: bool = False,
) -> EnvVar[Any]:
    """``declare_env`` with the kind itself, so nkipy-core's variables keep their value types
    (``get()`` of a variable without a default may be ``None``)."""
    var = EnvVar(name, kind, default, meaning, owner, input_only)
    with _lock:
        known = _table.setdefault(name, var)
    if known != var:
        raise ConfigurationError(
            f"environment variable {name} is declared twice, differently: by {known.owner} and "
            f"by {var.owner}. One distribution owns a variable; the other reads it with "
            "nkipy_core.env."
        )
    return known


def env(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of the declared variable ``name`` in ``environ`` (default: the process
    environment) now: its default when unset, else its parsed text."""
    var = _table.get(name)
    if var is None:
        raise ConfigurationError(
            f"environment variable {name} is not declared; declare it with "
            "nkipy_core.declare_env(...) when the module that reads it is imported"
        )
    return var.get(environ)


def table() -> list[EnvVar[Any]]:
    """The variables declared so far (nkipy-core's, and those of the packs imported), by name."""
    with _lock:
        return sorted(_table.values(), key=lambda v: v.name)


def _shown(default: Any) -> str:
    """A default as a user would set it."""
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


# -- nkipy-core's variables -----------------------------------------------------------------------

NKIPY_RUNTIME = _declare(
    "NKIPY_RUNTIME",
    kind=TEXT,
    meaning="The runtime to run on (`cpu`, `nrt`, `xla`, `auto`, `inductor`) when `init_nkipy_backend(runtime=...)` "
    "names none; unset picks the highest-priority available one.",
    owner=CORE,
)
NKIPY_CACHE = _declare(
    "NKIPY_CACHE",
    kind=PATH,
    default=Path("nkipy_cache"),
    meaning="The kernel cache directory when `init_nkipy_backend(nkipy_cache=...)` names none "
    "(relative to the working directory).",
    owner=CORE,
)
NKIPY_TARGET = _declare(
    "NKIPY_TARGET",
    kind=TEXT,
    meaning="The hardware generation to compile for (`trn1`, `trn2`, `trn3`) when "
    "`init_nkipy_backend(target=...)` names none; unset lets the runtime detect it.",
    owner=CORE,
)
NKIPY_PRECOMPILE = _declare(
    "NKIPY_PRECOMPILE",
    kind=TEXT,
    meaning="A runtime to compile every kernel for as well, into the cache, while the program "
    "runs on another (`nkipy-ops precompile` sets it).",
    owner=CORE,
)
NKIPY_PRECOMPILE_REPORT = _declare(
    "NKIPY_PRECOMPILE_REPORT",
    kind=PATH,
    meaning="Where a precompiling process writes its counts (JSON) at exit "
    "(`nkipy-ops precompile` sets it).",
    owner=CORE,
)
NKIPY_MANIFEST_RECORD = _declare(
    "NKIPY_MANIFEST_RECORD",
    kind=PATH,
    meaning="A precompile manifest (JSON) into which the process records every kernel it "
    "lowers, merged at exit (`nkipy-ops precompile --record` sets it).",
    owner=CORE,
)
NKIPY_MANIFEST = _declare(
    "NKIPY_MANIFEST",
    kind=PATH,
    meaning="The precompile manifest this host's kernel cache was built from: a kernel compiled "
    "at run time that it does not list is counted (`unlisted_kernels`) and warned about once.",
    owner=CORE,
)
NKIPY_MEMORY_LIMIT = _declare(
    "NKIPY_MEMORY_LIMIT",
    kind=BYTES,
    meaning="The most device memory the process's `nkipy` tensors and kernel results may hold "
    "at once when `init_nkipy_backend(memory_limit=...)` names none; an allocation past it raises "
    "`DeviceOutOfMemoryError` (a `torch.OutOfMemoryError`). Unset: no limit but the device's.",
    owner=CORE,
)
NKIPY_MAX_KERNELS = _declare(
    "NKIPY_MAX_KERNELS",
    kind=COUNT,
    meaning="The most kernel graphs one compiled function may need (its recompiles and "
    "specialisations together) when `init_nkipy_backend(max_kernels=...)` names none; one more "
    "raises `RecompileLimitError`, which says what recompiled and why. Unset: no limit.",
    owner=CORE,
)
NKIPY_EAGER_FUSION = _declare(
    "NKIPY_EAGER_FUSION",
    kind=FLAG,
    default=True,
    meaning="On: eager ops on `nkipy` tensors are queued and run as fused kernels when a value "
    "is needed; off: each eager op runs as its own kernel (as under "
    "`torch.use_deterministic_algorithms(True)`).",
    owner=CORE,
)
NKIPY_DEDUP_LAYERS = _declare(
    "NKIPY_DEDUP_LAYERS",
    kind=FLAG,
    default=True,
    meaning="On: a compiled graph's repeated layers (items of a `ModuleList` or `Sequential` of "
    "one of the model's own module classes, running the same ops) become one kernel per distinct "
    "layer, compiled once and called once per layer; off: each supported region is one kernel "
    "(as always on the `inductor` runtime, which compiles whole graphs in seconds).",
    owner=CORE,
)
NKIPY_CACHE_LOCK_TIMEOUT = _declare(
    "NKIPY_CACHE_LOCK_TIMEOUT",
    kind=SECONDS,
    default=3600.0,
    meaning="How long a process waits for another one compiling the same kernel into a shared "
    "cache before raising `CacheLockTimeoutError`.",
    owner=CORE,
)
NKIPY_CACHE_SHARED = _declare(
    "NKIPY_CACHE_SHARED",
    kind=TEXT,
    meaning="Read-only kernel cache directories consulted after the local one (separated by "
    "`:`), such as an NFS or FSx mount a build machine fills. Their entries are used only when "
    "signed by a key in `NKIPY_CACHE_TRUSTED_KEYS` or pinned in `NKIPY_CACHE_PINNED`.",
    owner=CORE,
)
NKIPY_CACHE_MAX_SIZE = _declare(
    "NKIPY_CACHE_MAX_SIZE",
    kind=BYTES,
    meaning="The most bytes the local kernel cache's entries may hold: past it, the least "
    "recently used entries are removed after each new one is stored. Unset: no limit.",
    owner=CORE,
)
NKIPY_CACHE_KEY = _declare(
    "NKIPY_CACHE_KEY",
    kind=PATH,
    meaning="The file holding this user's secret key, which seals the kernel cache entries "
    "this user's processes write (created, private, on first use). Unset: "
    "`~/.config/nkipy/cache.key`.",
    owner=CORE,
)
NKIPY_CACHE_SIGNING_KEY = _declare(
    "NKIPY_CACHE_SIGNING_KEY",
    kind=PATH,
    meaning="A private key made by `nkipy-ops cache keygen`: entries this process writes or "
    "exports are signed with it, so that hosts trusting its public key use them.",
    owner=CORE,
)
NKIPY_CACHE_TRUSTED_KEYS = _declare(
    "NKIPY_CACHE_TRUSTED_KEYS",
    kind=PATH,
    meaning="A file of public keys (`ed25519 <hex> name` per line, as `nkipy-ops cache keygen` "
    "prints them) whose signatures make shared, imported or copied kernel cache entries "
    "trusted.",
    owner=CORE,
)
NKIPY_CACHE_PINNED = _declare(
    "NKIPY_CACHE_PINNED",
    kind=PATH,
    meaning="A file of kernel cache entry digests (one per line, as `nkipy-ops cache export` "
    "writes them) trusted without a signature.",
    owner=CORE,
)
NKIPY_UPDATE_EXPECTED_FAILURES = _declare(
    "NKIPY_UPDATE_EXPECTED_FAILURES",
    kind=FLAG,
    default=False,
    meaning="On: a pack's conformance test rewrites its expected-failures file from the run "
    "instead of checking it.",
    owner=CORE,
)

# -- variables nkipy only reads -----------------------------------------------------------------

RANK = _declare(
    "RANK",
    kind=COUNT,
    default=0,
    meaning="The process's global rank, when torch.distributed is not initialised.",
    owner=LAUNCHER,
    input_only=True,
)
LOCAL_RANK = _declare(
    "LOCAL_RANK",
    kind=COUNT,
    meaning="The process's rank on its host: which NeuronCores it takes, and its rank (before "
    "`RANK`) when torch.distributed is not initialised.",
    owner=LAUNCHER,
    input_only=True,
)
WORLD_SIZE = _declare(
    "WORLD_SIZE",
    kind=COUNT,
    default=1,
    meaning="The number of processes, when torch.distributed is not initialised.",
    owner=LAUNCHER,
    input_only=True,
)
LOCAL_WORLD_SIZE = _declare(
    "LOCAL_WORLD_SIZE",
    kind=COUNT,
    default=1,
    meaning="The number of processes on this host, among which the visible NeuronCores are "
    "shared out.",
    owner=LAUNCHER,
    input_only=True,
)
NEURON_RT_VISIBLE_CORES = _declare(
    "NEURON_RT_VISIBLE_CORES",
    kind=TEXT,
    meaning="The NeuronCores this host's processes may use (`2`, `0-3`, `4,5,7`); unset: all of "
    "them. Each local rank is given its own block before the runtime starts.",
    owner=NEURON_RUNTIME,
    input_only=True,
)
TORCH_DEVICE_BACKEND_AUTOLOAD = _declare(
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
    kind=TORCH_FLAG,
    default=True,
    meaning="Whether `import torch` loads device backends, the `nkipy` device among them "
    "(`nkipy-ops doctor` reports it).",
    owner=TORCH,
    input_only=True,
)


# -- the documentation page ---------------------------------------------------------------------

HEADER = """\
# Configuration

<!-- Generated by docs/gen_configuration.py from nkipy_core.config.env; do not edit. -->

nkipy reads these environment variables. A setting passed to `init_nkipy_backend` or
`torch.compile(..., options={...})` wins over its variable. An empty variable counts as unset.
A value the variable does not accept fails with a `ConfigurationError` that names the variable
and what it accepts.

Packs declare their own variables (`nkipy_core.declare_env`); this page lists those of the packs
in this repository.
"""


def _row(var: EnvVar[Any]) -> str:
    default = "unset" if var.default is None else f"`{_shown(var.default)}`"
    return f"| `{var.name}` | {default} | {var.kind.accepts} | {var.meaning} | {var.owner} |"


def rows(input_only: bool) -> list[str]:
    """The table rows of the declared variables that are (or are not) ``input_only``."""
    return [_row(var) for var in table() if var.input_only == input_only]


def render() -> str:
    """``docs/configuration.md`` for the variables declared so far."""
    head = "| variable | default | accepts | meaning | owner |\n|---|---|---|---|---|"
    return "\n".join(
        [
            HEADER,
            "## nkipy's variables",
            "",
            head,
            *rows(input_only=False),
            "",
            "## Variables nkipy reads from the launcher, torch and the Neuron runtime",
            "",
            "nkipy does not define these; it reads them as their owners set them.",
            "",
            head,
            *rows(input_only=True),
            "",
        ]
    )
