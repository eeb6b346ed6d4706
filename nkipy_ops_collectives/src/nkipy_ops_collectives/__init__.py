"""nkipy-ops-collectives: the ``nkipy`` torch.distributed backend (``process_group``), registered
with torch by ``registration``; lowerings of ``_c10d_functional`` collectives arrive later."""
