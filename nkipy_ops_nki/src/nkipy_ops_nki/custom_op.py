"""``nki_op``: a torch custom op, its fake and (optionally) its autograd, made from an NKI kernel in one step.

    @nki_op("mylib::scale_add", grid=lambda x, y, alpha: (x.shape[0] // 128,))
    def scale_add(x, y, alpha=1.0): ...    # NKI kernel; returns its output tensor

    out = scale_add(a, b, 0.5)              # torch.ops.mylib.scale_add(a, b, 0.5)

The schema comes from the kernel's signature: parameters with a float, int or bool default are
scalars of that type, the others tensors; the op returns one tensor. The fake (what torch.compile
traces with) is ``out(*args) -> (shape, dtype)`` or, by default, a tensor like the first argument.
``backward(ctx, grad)`` with ``setup_context(ctx, inputs, output)`` gives it autograd, as
``torch.library.register_autograd`` does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from .registry import NKIOpRegistry

_SCALARS = {bool: "bool", int: "int", float: "float"}


def nki_op(
    name: str,
    *,
    grid: tuple[Any, ...] | Callable[..., tuple[Any, ...]] = (),
    out: Callable[..., tuple[tuple[int, ...], torch.dtype]] | None = None,
    backward: Callable[..., Any] | None = None,
    setup_context: Callable[..., Any] | None = None,
) -> Callable[[Callable[..., Any]], Any]:
    """Decorate an NKI kernel; returns the torch custom op (``torch.library.CustomOpDef``)."""

    def decorate(fn: Callable[..., Any]) -> Any:
        kernel = NKIOpRegistry.register(name)(fn)
        signature = inspect.signature(kernel.fn)

        def body(*args: Any) -> torch.Tensor:
            launch_grid = grid(*args) if callable(grid) else grid
            return kernel[launch_grid](*args) if launch_grid else kernel(*args)

        op = torch.library.custom_op(name, body, mutates_args=(), schema=_schema(signature, name))

        @op.register_fake
        def _fake(*args: Any) -> torch.Tensor:
            if out is None:
                return torch.empty_like(args[0])
            shape, dtype = out(*args)
            return args[0].new_empty(shape, dtype=dtype)

        if backward is not None:
            op.register_autograd(backward, setup_context=setup_context)
        op.kernel = kernel
        return op

    return decorate


def _schema(signature: inspect.Signature, name: str) -> str:
    params = []
    for p in signature.parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise TypeError(
                f"nki_op {name}: parameter {p.name!r} must be positional (NKI kernels take positional tensors)"
            )
        if p.default is p.empty:
            params.append(f"Tensor {p.name}")
        elif type(p.default) in _SCALARS:
            params.append(f"{_SCALARS[type(p.default)]} {p.name}={p.default!r}")
        else:
            raise TypeError(
                f"nki_op {name}: the default of {p.name!r} must be a float, int or bool, got {p.default!r}"
            )
    return f"({', '.join(params)}) -> Tensor"
