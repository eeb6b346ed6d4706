"""Helpers for testing nkipy and third-party op packs: reference models and the conformance harness."""
