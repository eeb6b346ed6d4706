"""``NKIOpRegistry``: which torch op an NKI kernel implements, so compiled graphs lower the op to it.

    @NKIOpRegistry.register("mylib::add")
    def add_kernel(a, b): ...              # an NKI kernel; the decorator returns an NKIKernel

    @torch.library.custom_op("mylib::add", mutates_args=())
    def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return add_kernel(a, b)            # eager: runs the kernel now

In a graph compiled with nkipy, ``mylib::add`` becomes a custom call inside the surrounding kernel
(``capture.py`` finds the launch in the op's body). Ops registered after the plugins were loaded
are added to the loaded lowering registry at once, so the order of imports does not matter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from nkipy_core import LoweringRegistry, _torch

from . import capture, custom_call
from .kernel import NKIKernel


class NKIOpRegistry:
    """Op name (``namespace::name``) -> the NKI kernel its body launches."""

    ops: ClassVar[dict[str, NKIKernel]] = {}
    #: the pack's view of the loaded lowering registry, once the plugins are loaded
    _lowerings: ClassVar[LoweringRegistry | None] = None

    @classmethod
    def register(cls, op: str) -> Callable[[Callable[..., Any]], NKIKernel]:
        """Decorate an NKI kernel as the implementation of ``op`` (defined now or later with
        ``torch.library.custom_op``)."""
        if "::" not in op:
            raise ValueError(f"an op name is 'namespace::name', got {op!r}")

        def decorate(fn: Callable[..., Any]) -> NKIKernel:
            kernel = fn if isinstance(fn, NKIKernel) else NKIKernel(fn)
            if op not in cls.ops and cls._lowerings is not None:
                cls._lowerings.register(op, lower_registered_op)
            cls.ops[op] = kernel  # registering again (a re-run cell) replaces the kernel
            return kernel

        return decorate

    @classmethod
    def install(cls, registry: LoweringRegistry) -> None:
        """Lower every registered op, now and as more are registered (the pack's lowering hook)."""
        cls._lowerings = registry
        for op in cls.ops:
            registry.register(op, lower_registered_op)


def lower_registered_op(ctx: Any, *args: Any, **kwargs: Any) -> Any:
    """A registered op as a custom call to the kernel its body launches."""
    launch = capture.launch_of(ctx.op, args, kwargs, ctx.out)
    name = _torch.schema(ctx.op).name
    return custom_call.lower(launch, name, [args[i] for i in launch.inputs], ctx.out)
