"""Helpers for testing nkipy and third-party op packs: reference models and the conformance harness."""

from nkipy_core.testing.closeness import assert_close_to_eager, upcast
from nkipy_core.testing.conformance import (
    ConformanceReport,
    OpCase,
    OpResult,
    assert_conformance,
    check_case,
    conformance_cases,
    load_op_db,
    lowered_ops,
    run_case,
    run_conformance,
)
from nkipy_core.testing.expected_failures import ExpectedFailures, expected_failures_for
from nkipy_core.testing.sweep import families, run_sweep

__all__ = [
    "ConformanceReport",
    "ExpectedFailures",
    "OpCase",
    "OpResult",
    "assert_close_to_eager",
    "assert_conformance",
    "check_case",
    "conformance_cases",
    "load_op_db",
    "lowered_ops",
    "run_case",
    "run_conformance",
    "run_sweep",
    "expected_failures_for",
    "families",
    "upcast",
]
