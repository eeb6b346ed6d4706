"""nkipy-ops-base: ATen lowerings for the core opset."""
