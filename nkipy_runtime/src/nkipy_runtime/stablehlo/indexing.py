"""Emitters of the indexing primitives (see registry.py for the emitter contract)."""

from __future__ import annotations
