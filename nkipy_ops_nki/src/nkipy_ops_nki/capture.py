"""Which NKI kernel an op launches, on what grid and with which arguments.

A registered op is ordinary torch code around a kernel call (``NKIOpRegistry``'s spelling). To
lower it, its body runs once on example CPU tensors while kernel calls only record their launch;
the launch is lowered when the body is exactly "launch one kernel and return its result": every
tensor the kernel gets is an input of the op or a zero-filled output buffer the body returns, so
nothing the body computes around the kernel is lost. Anything else declines the node, which then
runs the body as torch (kernel included) with a fallback warning naming the reason.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import torch

from nkipy_core import Unsupported, _torch
from nkipy_core.ir import TensorType, Traced

_RECORDING: contextvars.ContextVar[Recording | None] = contextvars.ContextVar(
    "nkipy_nki_recording", default=None
)


def current() -> Recording | None:
    return _RECORDING.get()


@attrs.frozen
class Launch:
    """One kernel launch as the op's arguments describe it.

    ``args`` has one entry per kernel argument: ``("input", i)`` the op's i-th argument,
    ``("zeros", shape, dtype)`` an output buffer, ``("value", x)`` a Python scalar. ``result`` is
    ``("returned", 0)`` (the kernel's returned tensor) or ``("arg", j)`` (kernel argument j)."""

    kernel: Any
    grid: tuple[Any, ...]
    args: tuple[tuple[Any, ...], ...]
    result: tuple[str, int]

    @property
    def inputs(self) -> list[int]:
        """The op's arguments the kernel reads, in the kernel's argument order."""
        return [a[1] for a in self.args if a[0] == "input"]


class Recording:
    def __init__(self, out: TensorType):
        self.placeholder = torch.empty(out.shape, dtype=out.dtype.torch)
        self.launches: list[tuple[Any, tuple[Any, ...], tuple[Any, ...]]] = []

    def record(self, kernel: Any, grid: tuple[Any, ...], args: Sequence[Any]) -> torch.Tensor:
        self.launches.append((kernel, grid, tuple(args)))
        return self.placeholder


@contextlib.contextmanager
def _recording(out: TensorType) -> Iterator[Recording]:
    rec = Recording(out)
    token = _RECORDING.set(rec)
    try:
        yield rec
    finally:
        _RECORDING.reset(token)


def launch_of(op: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Launch:
    """The launch of ``op`` applied to ``args`` (traced tensors and Python values) giving ``out``."""
    if not isinstance(out, TensorType):
        raise Unsupported("an NKI op with several results (a custom call has one)")
    if any(isinstance(v, Traced) for v in kwargs.values()):
        raise Unsupported("a tensor passed by keyword")
    # lowering may run inside the compiler's fake-tensor mode: the body must run on real tensors
    with _torch.unset_fake_temporarily(), _recording(out) as rec, torch.no_grad():
        example = [
            torch.ones(a.value.type.shape, dtype=a.value.type.dtype.torch)
            if isinstance(a, Traced)
            else a
            for a in args
        ]
        result = op(*example, **kwargs)
        if len(rec.launches) != 1:
            raise Unsupported(f"its body launches {len(rec.launches)} NKI kernels (one is lowered)")
        kernel, grid, kernel_args = rec.launches[0]
        encoded = tuple(_argument(j, a, example, result) for j, a in enumerate(kernel_args))
    if result is rec.placeholder:
        returned = ("returned", 0)
    else:
        returned = next((("arg", j) for j, a in enumerate(kernel_args) if a is result), None)
        if returned is None:
            raise Unsupported("its body returns something other than the kernel's result")
    return Launch(kernel, tuple(grid), encoded, returned)


def _argument(j: int, arg: Any, example: list[Any], result: Any) -> tuple[Any, ...]:
    if isinstance(arg, torch.Tensor):
        position = next((i for i, e in enumerate(example) if e is arg), None)
        if position is not None:
            return ("input", position)
        if arg is result:
            if torch.count_nonzero(arg).item():
                raise Unsupported(
                    f"kernel argument {j} (the output buffer) is not zero-filled (torch.zeros)"
                )
            return ("zeros", tuple(arg.shape), str(arg.dtype).removeprefix("torch."))
        raise Unsupported(
            f"kernel argument {j} is a tensor the body computed, not an input of the op"
        )
    if isinstance(arg, (bool, int, float)):
        return ("value", arg)
    raise Unsupported(f"kernel argument {j} is a {type(arg).__name__}")
