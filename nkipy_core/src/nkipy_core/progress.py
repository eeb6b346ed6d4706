"""Progress lines for kernel compiles slow enough to look like a hang.

A ``neuronx-cc`` compile takes seconds to minutes; a program that goes silent that long looks
stuck. So once a batch of compiles has run for ``SHOW_AFTER`` seconds, one line goes to stderr,
and another as each kernel finishes. stderr rather than the ``nkipy`` logger: the logger shows
WARNING and up by default and this is no warning, so it would stay invisible exactly when it is
needed; and stderr keeps the program's stdout clean. Fast compiles (the ``cpu`` runtime, a warm
cache) print nothing.
"""

from __future__ import annotations

import sys
import threading
import time

#: seconds a batch of compiles runs before progress is shown
SHOW_AFTER = 2.0


class CompileProgress:
    """``with CompileProgress(n, "nrt") as progress: ... progress.done()`` once per kernel."""

    def __init__(self, total: int, runtime_name: str):
        self.total = total
        self.runtime_name = runtime_name
        self._finished = 0
        self._shown = False
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

    def done(self) -> None:
        with self._lock:
            self._finished += 1
            if self._shown:
                self._line()

    def _announce(self) -> None:
        with self._lock:
            if self._finished < self.total:
                self._shown = True
                self._line()

    def _line(self) -> None:
        elapsed = time.monotonic() - self._start
        print(
            f"nkipy: compiling {self.total} kernel(s) for {self.runtime_name}: "
            f"{self._finished}/{self.total} done, {elapsed:.1f} s",
            file=sys.stderr, flush=True,
        )
