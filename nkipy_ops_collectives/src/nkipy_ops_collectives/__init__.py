"""nkipy-ops-collectives: the ``nkipy`` torch.distributed backend (``process_group``), registered
with torch by ``registration``; lowerings of ``_c10d_functional`` collectives arrive later."""

#: the backend's name in ``init_process_group`` and the device it serves (both modules use it,
#: and neither imports the other at load time: ``registration`` runs inside ``import torch``)
NAME = "nkipy"
