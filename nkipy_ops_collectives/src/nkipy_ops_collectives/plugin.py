"""Plugin module of this pack: loading it registers the ``nkipy`` torch.distributed backend
(``registration``), so processes that skipped torch's device autoload get it too. Lowerings of
``_c10d_functional`` collectives arrive with their own issue."""

from .registration import register

register()
