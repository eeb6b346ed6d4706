"""Running one OpInfo sample compiled and eager, and comparing the two (forward and backward)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import torch

from nkipy_core import _torch
from nkipy_core.compiler.fallback import FallbackWarning
from nkipy_core.testing.closeness import assert_close_to_eager, upcast

#: OpInfos whose results are uninitialised memory: only shape and dtype are compared
_UNDEFINED_VALUES = {
    "empty",
    "empty_like",
    "new_empty",
    "new_empty_strided",
    "empty_strided",
    "empty_permuted",
}
#: OpInfos whose results are unique only up to a gauge (the signs of eigen- and singular
#: vectors): their outputs are compared through the sample's ``output_process_fn_grad``, the
#: gauge-invariant view (``abs``, ``U @ Vh``) the OpInfo defines for its gradient checks
_GAUGE_OUTPUTS = {"linalg.eigh", "linalg.svd", "svd"}
_FALLBACK = re.compile(r"^nkipy: (\S+) runs on CPU: (.*)$", re.S)
_RAISED = re.compile(r"(?:^|; )(\S+) raised (\w+): ")


@attrs.frozen
class _Hole:
    index: int


def _template(value: Any, tensors: list[torch.Tensor]) -> Any:
    """``value`` with every tensor replaced by a ``_Hole`` numbering it in ``tensors``."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return _Hole(len(tensors) - 1)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_template(v, tensors) for v in value)
    if isinstance(value, dict):
        return {k: _template(v, tensors) for k, v in value.items()}
    return value


def _fill(template: Any, tensors: Sequence[torch.Tensor]) -> Any:
    if isinstance(template, _Hole):
        return tensors[template.index]
    if isinstance(template, (list, tuple)):
        return type(template)(_fill(v, tensors) for v in template)
    if isinstance(template, dict):
        return {k: _fill(v, tensors) for k, v in template.items()}
    return template


def _clone(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(t.requires_grad)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    return [value]


class _Mismatch(Exception):
    pass


def one_line(text: str, limit: int = 400) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    joined = "; ".join(lines)
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."


def _compare(
    actual: Any,
    expected: Any,
    tol: tuple[float, float],
    what: str,
    values: bool = True,
    exact: Callable[[], Any] | None = None,
) -> None:
    try:
        if values:
            assert_close_to_eager(actual, expected, rtol=tol[0], atol=tol[1], exact=exact)
        else:
            for a, e in zip(_leaves(actual), _leaves(expected), strict=True):
                if isinstance(e, torch.Tensor):
                    assert isinstance(a, torch.Tensor), f"expected a tensor, got {type(a).__name__}"
                    assert (a.shape, a.dtype) == (e.shape, e.dtype), (
                        f"{a.shape}/{a.dtype} != {e.shape}/{e.dtype}"
                    )
    except (AssertionError, ValueError, TypeError) as exc:
        raise _Mismatch(f"{what}: {one_line(str(exc))}") from None


@attrs.define
class SampleOutcome:
    """What one sample did: compared (ok or not) or skipped, and the fallbacks it produced."""

    index: int = 0
    grad: bool = False
    fwd_checked: bool = False
    fwd_ok: bool = False
    bwd_checked: bool = False
    bwd_ok: bool = False
    error: str = ""
    skipped: str = ""
    fallbacks: dict[str, str] = attrs.Factory(dict)
    #: values compared, not only shapes and dtypes
    values: bool = True

    @property
    def id(self) -> str:
        """How reports and expected-failures files name it: the OpInfo sample index, with
        ``:grad`` for a run with ``requires_grad`` inputs (outputs and gradients compared)."""
        return f"{self.index}:grad" if self.grad else str(self.index)

    def failure(self) -> str:
        """Why this sample fails ("" if it does not): a mismatch or exception, or a rule that
        raised while the backend tried it (the core falls back; for a pack it is a bug)."""
        if self.error:
            return self.error
        raised = [(op, why) for op, why in sorted(self.fallbacks.items()) if _RAISED.search(why)]
        return (
            one_line(f"rule raised while lowering {raised[0][0]}: {raised[0][1]}") if raised else ""
        )


def _compiled(fn: Callable[..., Any], options: dict[str, Any]) -> Callable[..., Any]:
    torch.compiler.reset()
    return torch.compile(fn, backend="nkipy", fullgraph=False, dynamic=False, options=options)


def run_sample(
    opinfo: Any,
    sample: Any,
    *,
    backward: bool,
    tol: tuple[float, float],
    options: dict[str, Any],
    seed: int,
    result: SampleOutcome,
) -> None:
    """Compare one sample compiled vs eager and fill ``result``.

    Without ``backward`` the inputs do not require grad (an inference graph) and the outputs
    are compared. With it they do (OpInfo sets ``requires_grad``), the outputs are compared and,
    if some output is differentiable, so are the gradients for a seeded random cotangent.
    """
    op = opinfo.op
    tensors: list[torch.Tensor] = []
    template = _template((sample.input, tuple(sample.args), dict(sample.kwargs)), tensors)

    def call(*ts: torch.Tensor) -> Any:
        inp, args, kwargs = _fill(template, ts)
        return op(inp, *args, **kwargs)

    values = result.values and opinfo.name not in _UNDEFINED_VALUES
    grad_mode = torch.enable_grad if backward else torch.no_grad
    process = getattr(sample, "output_process_fn_grad", None) or (lambda x: x)

    def differentiable(out: Any) -> list[torch.Tensor]:
        return [o for o in _leaves(process(out)) if isinstance(o, torch.Tensor) and o.requires_grad]

    eager_in = [_clone(t) for t in tensors]
    try:
        with grad_mode():
            expected = call(*eager_in)
    except Exception as exc:  # noqa: BLE001 - a sample eager cannot run is not the pack's business
        result.skipped = f"eager raised {type(exc).__name__}: {one_line(str(exc), 120)}"
        return
    if values and _draws_random(call, tensors, expected, grad_mode, seed):
        values = result.values = False
    wrt = [i for i, t in enumerate(eager_in) if t.requires_grad]
    outs = differentiable(expected) if backward and wrt else []
    if outs:
        generator = torch.Generator().manual_seed(seed)
        cotangents = [torch.randn(o.shape, dtype=o.dtype, generator=generator) for o in outs]
        grads = torch.autograd.grad(outs, [eager_in[i] for i in wrt], cotangents, allow_unused=True)
    compiled_in = [_clone(t) for t in tensors]
    what = "bwd run" if backward else "fwd"
    result.fwd_checked = True
    try:
        with grad_mode():
            actual = _compiled(call, options)(*compiled_in)
        shown = process if opinfo.name in _GAUGE_OUTPUTS else (lambda x: x)
        _compare(
            shown(actual),
            shown(expected),
            tol,
            f"{what} output",
            values,
            exact=lambda: shown(call(*upcast(tensors))),
        )
        result.fwd_ok = True
        if not outs:
            return
        what = "bwd"
        result.bwd_checked = True
        outs_c = differentiable(actual)
        if len(outs_c) != len(outs):
            raise _Mismatch(f"bwd: {len(outs_c)} differentiable outputs, eager has {len(outs)}")
        grads_c = torch.autograd.grad(
            outs_c, [compiled_in[i] for i in wrt], cotangents, allow_unused=True
        )
        for gc, ge, i in zip(grads_c, grads, wrt):
            gc = torch.zeros_like(compiled_in[i]) if gc is None else gc
            ge = torch.zeros_like(eager_in[i]) if ge is None else ge
            _compare(gc, ge, (tol[0], tol[1] * 10), f"bwd grad of input {i}", values)
        result.bwd_ok = True
    except _Mismatch as exc:
        result.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - any exception under compile is a failure to report
        inner = _unwrap(exc)
        result.error = f"{what} raised {type(inner).__name__}: {one_line(str(inner))}"


def _draws_random(
    call: Callable[..., Any], tensors: list[torch.Tensor], expected: Any, grad_mode: Any, seed: int
) -> bool:
    """Whether eager gives other values under another random state: a sample that draws random
    numbers where no keyword says so (``multi_head_attention_forward``'s positional dropout), whose
    values kernels drawing from Philox cannot match, so only shapes and dtypes are compared.
    Eager runs again under a few other seeds: a draw with few likely outcomes (``multinomial``
    of three categories) often repeats once."""
    for k in range(1, _RESEEDS + 1):
        # the CPU generator only: forking or seeding every device's would start the nkipy device
        with torch.random.fork_rng(devices=[]), grad_mode():
            torch.default_generator.manual_seed(seed + k)
            again = call(*[_clone(t) for t in tensors])
        for e, a in zip(_leaves(expected), _leaves(again)):
            if isinstance(e, torch.Tensor):
                try:
                    torch.testing.assert_close(a, e, rtol=0, atol=0, equal_nan=True)
                except AssertionError:
                    return True
    return False


#: other seeds ``_draws_random`` tries before it calls a sample deterministic
_RESEEDS = 8


def _unwrap(exc: BaseException) -> BaseException:
    """The backend's own exception inside dynamo's ``BackendCompilerFailed``."""
    while isinstance(exc, _torch.BackendCompilerFailed) and exc.inner_exception is not None:
        exc = exc.inner_exception
    return exc


def fallbacks_named(caught: Iterable[warnings.WarningMessage]) -> dict[str, str]:
    found: dict[str, str] = {}
    for w in caught:
        if issubclass(w.category, FallbackWarning):
            match = _FALLBACK.match(str(w.message))
            if match:
                found.setdefault(match.group(1), match.group(2))
            else:
                found.setdefault("<graph>", str(w.message))
    return found
