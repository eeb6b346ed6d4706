"""Keep dynamo out of the device's Python code, as it keeps out of ``torch.cuda``'s.

Programs that dynamo compiles call the device module through torch (``torch.random.fork_rng``,
``torch.testing._utils.freeze_rng_state``, ``torch.accelerator``). Dynamo inlines any function
outside torch's own files, and tracing ours under fake tensors fails (``set_rng_state`` under
``no_dispatch()``) or runs runtime code at trace time. Dynamo's skip list (``trace_rules.add``)
makes it call them natively after a graph break, exactly as it calls ``torch.cuda.get_rng_state``.

The device registers inside ``import torch``, long before dynamo is imported, and importing
dynamo there would slow down every ``import torch``: so the package joins the skip list when
dynamo's ``trace_rules`` module is first imported (or at once if it already is).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

TRACE_RULES = "torch._dynamo.trace_rules"


def skip_in_dynamo(package: str) -> None:
    """Put ``package``'s files on dynamo's skip list, now or when dynamo is imported."""
    rules = sys.modules.get(TRACE_RULES)
    if rules is not None:
        rules.add(package)
    elif not any(isinstance(f, _AddWhenImported) and f.package == package for f in sys.meta_path):
        sys.meta_path.insert(0, _AddWhenImported(package))


class _AddWhenImported(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``trace_rules`` is being imported, it wraps the real loader so
    that ``package`` is added right after the module has run, then leaves ``sys.meta_path``."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, fullname, path, target=None):
        if fullname != TRACE_RULES:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        load, package = spec.loader.exec_module, self.package

        def exec_module(module) -> None:
            load(module)
            module.add(package)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]  # wraps this one loader
        return spec
