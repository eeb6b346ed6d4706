"""nkipy-ops-nki: NKI kernels as torch custom ops and ATen overrides (skeleton)."""
