"""NKIPy IR as torch operations: each primitive's rule (``rules``) and a kernel as one FX graph
of ATen operations (``graph``), which TorchInductor compiles for the ``inductor`` runtime."""
