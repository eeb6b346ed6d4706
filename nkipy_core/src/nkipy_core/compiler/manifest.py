"""Precompile manifests: every kernel a run needed, as data a build machine compiles from
without running the program again.

``nkipy-ops precompile --record manifest.json -- python train.py`` runs the program with
``NKIPY_MANIFEST_RECORD`` set: each kernel it lowers (every graph, every size set, every eager
fusion) is noted as its IR text and the data that text shows only by digest, and written at exit,
merged with what the file already holds (ranks of one ``torchrun`` share it under a lock).
``nkipy-ops precompile --from manifest.json --runtime nrt`` parses each kernel back (strictly,
``ir.parser``) and compiles it into the cache, in parallel, under the keys the program's own
process will look up. At run time, ``NKIPY_MANIFEST`` names the manifest a host was provisioned
from: a kernel compiled there that it does not list is counted in ``STATS["unlisted_kernels"]``
and warned about once (an input the build did not see, a recompile the manifest missed).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import threading
import warnings
from pathlib import Path
from typing import Any

from nkipy_core.cache import keys
from nkipy_core.cache.kernel_cache import STATS, atomic_write
from nkipy_core.config import env
from nkipy_core.errors import ConfigurationError
from nkipy_core.ir.graph import Kernel
from nkipy_core.ir.parser import parse_kernel
from nkipy_core.ir.printer import format_kernel, kernel_data

log = logging.getLogger("nkipy.precompile")

FORMAT = "nkipy-manifest/1"


class ManifestWarning(UserWarning):
    """A kernel was compiled at run time that the precompile manifest does not list."""


class _Recorder:
    """The kernels of this process, written to ``NKIPY_MANIFEST_RECORD`` at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.kernels: dict[str, dict[str, Any]] = {}
        self._registered = False

    def note(self, kernel: Kernel, name: str) -> None:
        path = env.NKIPY_MANIFEST_RECORD.get()
        if path is None:
            return
        text = format_kernel(kernel, with_origin=False)
        with self._lock:
            self.kernels.setdefault(
                keys.digest(text), {"name": name, "ir": text, "data": kernel_data(kernel)}
            )
            if not self._registered:
                atexit.register(write, Path(path), self)
                self._registered = True


RECORDER = _Recorder()


def recording() -> bool:
    """Whether this process records a manifest: it then lowers every kernel (the index of
    lowered graphs would skip the IR the manifest needs)."""
    return env.NKIPY_MANIFEST_RECORD.get() is not None


def write(path: Path, recorder: _Recorder = RECORDER) -> int:
    """Merge the recorder's kernels into the manifest at ``path``; how many it lists then."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # ranks of one run merge one after the other
        kernels = read(path) if path.exists() else {}
        with recorder._lock:
            kernels.update(recorder.kernels)
        document = {
            "format": FORMAT,
            "kernels": [{"ir_sha256": k, **v} for k, v in sorted(kernels.items())],
        }
        atomic_write(path, json.dumps(document, indent=1).encode(), path.parent)
    return len(kernels)


def read(path: Path) -> dict[str, dict[str, Any]]:
    """The kernels a manifest lists, by IR digest; ``ConfigurationError`` if it is not one."""
    try:
        document = json.loads(Path(path).read_text())
        if document.get("format") != FORMAT:
            raise ValueError(f"format is {document.get('format')!r}, not {FORMAT!r}")
        return {
            k["ir_sha256"]: {"name": k["name"], "ir": k["ir"], "data": k["data"]}
            for k in document["kernels"]
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigurationError(
            f"{path} is not a precompile manifest ({exc}); make one with "
            "`nkipy-ops precompile --record manifest.json -- CMD`"
        ) from None


def kernels_of(path: Path) -> list[tuple[str, Kernel]]:
    """(name, kernel) of every kernel a manifest lists, parsed strictly (``ir.parser``): a
    manifest is data from another machine, never code."""
    return [(k["name"], parse_kernel(k["ir"], k["data"])) for k in read(path).values()]


_LISTED: dict[Path, frozenset[str]] = {}
_WARNED: set[Path] = set()


def check_compiled(ir_text: str, name: str) -> None:
    """Count and warn once when a kernel is compiled that ``NKIPY_MANIFEST`` does not list."""
    path = env.NKIPY_MANIFEST.get()
    if path is None:
        return
    if path not in _LISTED:
        _LISTED[path] = frozenset(read(path))
    if keys.digest(ir_text) in _LISTED[path]:
        return
    STATS["unlisted_kernels"] += 1
    log.info("kernel %s was compiled at run time: the manifest %s does not list it", name, path)
    if path not in _WARNED:
        _WARNED.add(path)
        warnings.warn(
            f"nkipy: kernel {name} was compiled at run time, but the precompile manifest "
            f"{path} does not list it (counted in cache_stats['unlisted_kernels']). Record "
            "the manifest with the inputs this run uses: `nkipy-ops precompile --record`.",
            ManifestWarning,
            stacklevel=4,
        )
