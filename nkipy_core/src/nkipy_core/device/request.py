"""Whether this program asked for the ``nkipy`` device in code (``register_device``).

Asked for, the device is the accelerator torch picks even on the ``cpu`` simulator, as when
``NKIPY_RUNTIME`` names a runtime; registered without a request (the test suites do), it is not.
Its own module because both ``registration`` (which records the request) and ``torch.nkipy``'s
``is_available`` (which reads it) need it, and ``registration`` imports ``torch.nkipy``.
"""

from __future__ import annotations

_requested = False


def record() -> None:
    global _requested
    _requested = True


def requested() -> bool:
    return _requested
