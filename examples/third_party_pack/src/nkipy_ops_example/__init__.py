"""nkipy-ops-example: a minimal third-party op pack (see docs/writing-a-pack.md)."""
