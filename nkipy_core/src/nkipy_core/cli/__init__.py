"""The ``nkipy-ops`` command line: one module per command group."""
