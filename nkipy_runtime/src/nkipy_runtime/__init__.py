"""nkipy-runtime: StableHLO/HLO emission, the neuronx-cc driver, the NRT binding (``nrt``), the ``xla`` runtime and the ``inductor`` runtime (kernels compiled by TorchInductor)."""
