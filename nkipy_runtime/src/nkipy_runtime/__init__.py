"""nkipy-runtime: HLO emission, neuronx-cc driver and NRT binding (skeleton)."""
