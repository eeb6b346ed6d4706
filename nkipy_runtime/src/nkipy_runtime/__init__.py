"""nkipy-runtime: StableHLO/HLO emission, the neuronx-cc driver, the NRT binding (``nrt``) and the ``xla`` runtime."""
