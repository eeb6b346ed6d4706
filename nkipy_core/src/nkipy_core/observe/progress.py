"""Progress for kernel compiles slow enough to look like a hang.

A ``neuronx-cc`` compile takes seconds to minutes; a program that goes silent that long looks
stuck. So once a batch of compiles (the kernels of one graph, e.g. under ``nkipy-ops
precompile`` or the first run of a big model) has run for ``SHOW_AFTER`` seconds, progress
shows on stderr: a ``tqdm`` bar when stderr is a terminal, else (a log file, CI) one line then
and another as each kernel finishes. stderr rather than the ``nkipy`` logger: the logger shows
WARNING and up by default and this is no warning, so it would stay invisible exactly when it is
needed; and stderr keeps the program's stdout clean. Fast compiles (the ``cpu`` runtime, a warm
cache) print nothing. ``tqdm`` is imported only when a bar is shown, never at import.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

#: seconds a batch of compiles runs before progress is shown
SHOW_AFTER = 2.0


class CompileProgress:
    """``with CompileProgress(n, "nrt") as progress: ... progress.done()`` once per kernel."""

    def __init__(self, total: int, runtime_name: str):
        self.total = total
        self.runtime_name = runtime_name
        self._finished = 0
        self._shown = False
        self._bar: Any = None
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._timer = threading.Timer(SHOW_AFTER, self._announce)
        self._timer.daemon = True

    def __enter__(self) -> CompileProgress:
        self._start = time.monotonic()
        if self.total:
            self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._timer.cancel()
        with self._lock:
            if self._bar is not None:
                self._bar.close()

    def done(self) -> None:
        with self._lock:
            self._finished += 1
            if self._bar is not None:
                self._bar.update(1)
            elif self._shown:
                self._line()

    def _announce(self) -> None:
        with self._lock:
            if self._finished < self.total:
                self._shown = True
                if _is_terminal(sys.stderr):
                    self._bar = self._new_bar()
                else:
                    self._line()

    def _new_bar(self) -> Any:
        from tqdm import tqdm

        bar = tqdm(
            total=self.total,
            initial=self._finished,
            desc=f"nkipy: compiling for {self.runtime_name}",
            unit="kernel",
            file=sys.stderr,
            dynamic_ncols=True,
        )
        bar.start_t -= time.monotonic() - self._start  # its clock counts from the batch's start
        bar.refresh()
        return bar

    def _line(self) -> None:
        elapsed = time.monotonic() - self._start
        print(
            f"nkipy: compiling {self.total} kernel(s) for {self.runtime_name}: "
            f"{self._finished}/{self.total} done, {elapsed:.1f} s",
            file=sys.stderr,
            flush=True,
        )


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):  # a closed or detached stream
        return False
