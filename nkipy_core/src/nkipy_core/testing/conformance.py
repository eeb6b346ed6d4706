"""Conformance harness: PyTorch's OpInfo database through ``torch.compile(backend="nkipy")``.

For every ATen op a pack lowers, the OpInfos whose op maps to it are run on a few of their
sample inputs, compiled with the nkipy backend and compared with eager, forward and (for
differentiable ops) backward. Any pack can run it on its own ops::

    from nkipy_core.testing import assert_conformance, run_conformance

    def test_my_pack_conforms():
        report = run_conformance("my-nkipy-pack", max_samples=2)
        print(report.table())
        assert_conformance(report)

or one test per op::

    from nkipy_core.testing import check_case, conformance_cases

    @pytest.mark.parametrize("case", conformance_cases("my-nkipy-pack"), ids=str)
    def test_op(case):
        check_case(case, max_samples=2)

Each row is one OpInfo (``name.variant``) at one dtype, with the lowered overloads it targets:

- ``pass``: every sample matched eager, and at least one compiled graph contained a target
  overload that the pack lowered (the op was really exercised, not just run on CPU);
- ``fallback``: the results matched, but a ``FallbackWarning`` named an overload of the op
  (no rule, or the rule declined with ``Unsupported``) - the note says which and why;
- ``fail``: a mismatch against eager, an exception, or a rule (of any op in the graphs) that
  *raised* while being tried (the core turns that into a fallback; here it is a bug) - the
  note holds the first error;
- ``skip``: nothing to compare (no OpInfo covers the op, the OpInfo does not support the
  dtype, a random op without a deterministic sample, no sample reaches a target overload, or
  the time budget ran out) - the note says which.

Samples: values of ``empty``-like ops are not compared (only shapes and dtypes). Random ops
(``nondeterministic_seeded``) draw other numbers than eager (Philox in the kernels), so their
values are compared only on samples that turn randomness off (``p=0``/``dropout_p=0``); their
other samples are compared by shape and dtype, forward and backward, and a passing row says how
many samples were (their distributions are tested statistically in the pack's own tests).
What the compiled graphs contained is observed through a ``nkipy_graph_passes`` hook
registered for the duration of the run; fallbacks are read from the ``FallbackWarning``s.

OpInfos are matched to lowered ops by name: the OpInfo's ``name``, ``aten_name`` and alias
names (and their last component for ``nn.functional.*``/``special.*``) against the ATen packet
name and its normalised forms (``_softmax`` -> ``softmax``, ``native_layer_norm`` ->
``layer_norm``, ``add_`` -> ``add``, ``gelu_backward`` -> ``gelu`` with backward forced on), plus
``EXTRA_OPINFOS`` for ops whose OpInfo has another name (``convolution`` -> ``nn.functional.conv2d``).
Every variant (``div.trunc_rounding``...) is its own row.

Importing ``torch.testing._internal.common_methods_invocations`` needs the ``expecttest``
package (the ``nkipy-core[testing]`` extra). Importing it also calls ``torch.backends.disable_global_flags()``, as PyTorch's own tests do.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from .. import plugins
from ..compiler import FallbackWarning
from ..hookspecs import hookimpl
from ..registry import op_name
from .closeness import assert_close_to_eager, upcast
from .expected_failures import ExpectedFailures

__all__ = [
    "EXTRA_OPINFOS", "STATUSES", "TOLERANCES", "ConformanceReport", "OpCase", "OpResult",
    "assert_conformance", "check_case", "conformance_cases", "load_op_db", "lowered_ops",
    "run_case", "run_conformance",
]

STATUSES = ("pass", "fallback", "fail", "skip")

#: (rtol, atol) for forward results; gradients use the same rtol and ten times the atol
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}

#: ATen packet -> OpInfo names that reach it although their names differ
EXTRA_OPINFOS: dict[str, tuple[str, ...]] = {
    "convolution": (
        "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d",
        "nn.functional.conv_transpose1d", "nn.functional.conv_transpose2d",
        "nn.functional.conv_transpose3d",
    ),
    "convolution_backward": ("nn.functional.conv1d", "nn.functional.conv2d"),
    "mm": ("matmul", "nn.functional.linear"),
    "bmm": ("matmul",),
    "addmm": ("nn.functional.linear",),
    "_native_batch_norm_legit": ("nn.functional.batch_norm",),
    "_native_batch_norm_legit_no_training": ("nn.functional.batch_norm",),
    "_native_batch_norm_legit_functional": ("nn.functional.batch_norm",),
    "max_pool2d_with_indices": ("nn.functional.max_pool2d",),
    "max_pool2d_with_indices_backward": ("nn.functional.max_pool2d",),
    "embedding_dense_backward": ("nn.functional.embedding",),
    "_embedding_bag_forward_only": ("nn.functional.embedding_bag",),
    "_embedding_bag_dense_backward": ("nn.functional.embedding_bag",),
    "_embedding_bag_per_sample_weights_backward": ("nn.functional.embedding_bag",),
    "grid_sampler_2d": ("nn.functional.grid_sample",),
    "threshold_backward": ("nn.functional.relu", "nn.functional.threshold"),
    "_to_copy": ("to",),
    "slice": ("narrow",),
    "_unsafe_view": ("view", "reshape"),
    "index": ("__getitem__",),
    "zero": ("zero_",),
    "normal_functional": ("normal",),
    "_scaled_dot_product_flash_attention_for_cpu": ("nn.functional.scaled_dot_product_attention",),
    "_scaled_dot_product_flash_attention": ("nn.functional.scaled_dot_product_attention",),
    "_scaled_dot_product_efficient_attention": ("nn.functional.scaled_dot_product_attention",),
}

#: OpInfos whose results are uninitialised memory: only shape and dtype are compared
_UNDEFINED_VALUES = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"}
#: name prefixes whose last component is itself a torch op name
_NAMESPACES = ("nn.functional.", "special.")
_FALLBACK = re.compile(r"^nkipy: (\S+) runs on CPU: (.*)$", re.S)
_RAISED = re.compile(r"(?:^|; )(\S+) raised (\w+): ")


# -- the OpInfo database ------------------------------------------------------------------------


def load_op_db() -> list[Any]:
    """PyTorch's OpInfo list (``common_methods_invocations.op_db``); imported on first use."""
    try:
        import expecttest  # noqa: F401
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "the conformance harness imports PyTorch's OpInfo database, which needs `expecttest`: "
            "pip install 'nkipy-core[testing]'"
        ) from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    return op_db


# -- selecting cases ------------------------------------------------------------------------------


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lowered_ops(target: str | Iterable[Any]) -> list[str]:
    """The ATen overload names ``target`` stands for.

    ``target`` is a distribution (``"nkipy-ops-base"``) or plugin name, whose registered rules
    are listed from the loaded plugins; an overload name (``"aten::exp.default"``); or an
    iterable of overload names, ``OpOverload``s or ``OpOverloadPacket``s (all their overloads).
    """
    if isinstance(target, str) and "::" not in target:
        wanted = _normalise(target)
        registry = plugins.get().lowerings
        ops = sorted({
            rule.op for rule in registry.all_rules()
            if wanted in (_normalise(rule.provenance.distribution), _normalise(rule.provenance.plugin))
        })
        if not ops:
            known = sorted({rule.provenance.distribution for rule in registry.all_rules()})
            raise ValueError(
                f"no loaded plugin named {target!r} registers lowering rules; distributions with "
                f"rules: {known or 'none'}. Install the pack, or pass a list of ATen overloads."
            )
        return ops
    items = [target] if isinstance(target, (str, torch._ops.OpOverload, torch._ops.OpOverloadPacket)) else target
    names: list[str] = []
    for item in items:
        if isinstance(item, torch._ops.OpOverloadPacket):
            names.extend(op_name(getattr(item, o)) for o in item.overloads())
        else:
            names.append(op_name(item))
    return sorted(set(names))


def _packet(overload: str) -> str:
    """``aten::add.Tensor`` -> ``aten::add``."""
    return overload.rsplit(".", 1)[0]


def _packet_keys(packet: str) -> tuple[set[str], bool]:
    """OpInfo names an ATen packet answers to, and whether it only runs in backward graphs."""
    namespace, name = packet.split("::")
    if namespace != "aten":
        return set(), False
    keys = {name, *EXTRA_OPINFOS.get(name, ())}
    base, backward = name, False
    for suffix in ("_backward_data", "_backward"):
        if base.endswith(suffix):
            base, backward = base[: -len(suffix)], True
            break
    keys.update(EXTRA_OPINFOS.get(base, ()))
    base = base.lstrip("_")
    if base.startswith("native_"):
        base = base[len("native_"):]
    if base.endswith("_") and not base.endswith("__"):
        base = base[:-1]
    keys.add(base)
    return keys, backward


def _opinfo_keys(opinfo: Any) -> set[str]:
    names = [opinfo.name, opinfo.aten_name, *(a.name for a in getattr(opinfo, "aliases", ()))]
    keys = set()
    for name in names:
        if not name:
            continue
        keys.add(name)
        for prefix in _NAMESPACES:
            if name.startswith(prefix):
                keys.add(name[len(prefix):])
        if name.startswith("torch."):
            keys.add(name[len("torch."):])
    return keys


@attrs.frozen
class OpCase:
    """One OpInfo (``name.variant``) and the lowered overloads its samples should reach.

    ``opinfo`` is ``None`` for a lowered overload that no OpInfo covers (always a ``skip`` row).
    ``backward_only`` means every target only appears in backward graphs (backward is forced on).
    """

    name: str
    targets: tuple[str, ...]
    opinfo: Any = attrs.field(default=None, eq=False, repr=False)
    backward_only: bool = False

    def __str__(self) -> str:
        return self.name


def conformance_cases(
    target: str | Iterable[Any],
    *,
    include: Collection[str] | None = None,
    exclude: Collection[str] = (),
) -> list[OpCase]:
    """The cases for ``target`` (see ``lowered_ops``), sorted by name.

    ``include``/``exclude`` filter by case name (``"div.trunc_rounding"``), OpInfo name
    (``"div"``) or target overload (``"aten::div.Tensor_mode"``).
    """
    ops = lowered_ops(target)
    by_key: dict[str, list[tuple[str, bool]]] = {}
    for overload in ops:
        keys, backward = _packet_keys(_packet(overload))
        for key in keys:
            by_key.setdefault(key, []).append((overload, backward))
    cases: list[OpCase] = []
    covered: set[str] = set()
    for opinfo in load_op_db():
        hits = {hit for key in _opinfo_keys(opinfo) for hit in by_key.get(key, ())}
        if not hits:
            continue
        targets = tuple(sorted({overload for overload, _ in hits}))
        covered.update(targets)
        backward_only = all(backward for _, backward in hits)
        cases.append(OpCase(opinfo.full_name, targets, opinfo, backward_only))
    cases.extend(OpCase(overload, (overload,)) for overload in ops if overload not in covered)

    def wanted(case: OpCase) -> bool:
        names = {case.name, case.name.split(".")[0] if case.opinfo is None else case.opinfo.name, *case.targets}
        if include is not None and not names & set(include):
            return False
        return not names & set(exclude)

    return sorted((c for c in cases if wanted(c)), key=lambda c: c.name)


# -- observing what the backend does --------------------------------------------------------------


class _Observer:
    """A graph pass that records the ATen overloads of every graph the backend compiles."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    @hookimpl(trylast=True)
    def nkipy_graph_passes(self, stage: str):
        return [self._record] if stage == "aten" else None

    def _record(self, gm: torch.fx.GraphModule) -> None:
        for node in gm.graph.nodes:
            if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
                self.seen.add(op_name(node.target))


@contextlib.contextmanager
def _observing() -> Iterator[_Observer]:
    observer = _Observer()
    manager = plugins.get().manager
    name = f"nkipy-conformance-observer-{id(observer)}"
    manager.register(observer, name=name)
    try:
        yield observer
    finally:
        if manager.get_plugin(name) is not None:
            manager.unregister(name=name)


def _call(op: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return op(*args, **kwargs)


@contextlib.contextmanager
def _traceable_opinfo_wrappers() -> Iterator[None]:
    """Random ops' OpInfos call ``wrapper_set_seed``, which dynamo cannot trace (it saves and
    reseeds the RNG); their values are only compared on deterministic samples, so call the op
    directly."""
    from torch.testing._internal import common_methods_invocations as cmi

    saved = cmi.wrapper_set_seed
    cmi.wrapper_set_seed = _call
    try:
        yield
    finally:
        cmi.wrapper_set_seed = saved


#: loggers whose warnings (graph breaks, recompiles) are noise in a conformance run
_NOISY_LOGGERS = ("torch._dynamo", "torch._functorch", "torch.fx.experimental.symbolic_shapes")


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


@contextlib.contextmanager
def _cache_dir(cache_dir: str | Path | None) -> Iterator[Path]:
    if cache_dir is not None:
        yield Path(cache_dir)
        return
    with tempfile.TemporaryDirectory(prefix="nkipy-conformance-") as tmp:
        yield Path(tmp)


# -- running one sample ---------------------------------------------------------------------------


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


def _one_line(text: str, limit: int = 400) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    joined = "; ".join(lines)
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."


def _compare(actual: Any, expected: Any, tol: tuple[float, float], what: str, values: bool = True,
             exact: Callable[[], Any] | None = None) -> None:
    try:
        if values:
            assert_close_to_eager(actual, expected, rtol=tol[0], atol=tol[1], exact=exact)
        else:
            for a, e in zip(_leaves(actual), _leaves(expected), strict=True):
                if isinstance(e, torch.Tensor):
                    assert isinstance(a, torch.Tensor), f"expected a tensor, got {type(a).__name__}"
                    assert (a.shape, a.dtype) == (e.shape, e.dtype), f"{a.shape}/{a.dtype} != {e.shape}/{e.dtype}"
    except (AssertionError, ValueError, TypeError) as exc:
        raise _Mismatch(f"{what}: {_one_line(str(exc))}") from None


@attrs.define
class _Sample:
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
        return _one_line(f"rule raised while lowering {raised[0][0]}: {raised[0][1]}") if raised else ""


def _compiled(fn: Callable[..., Any], options: dict[str, Any]) -> Callable[..., Any]:
    torch._dynamo.reset()
    return torch.compile(fn, backend="nkipy", fullgraph=False, dynamic=False, options=options)


def _run_sample(
    opinfo: Any, sample: Any, *, backward: bool, tol: tuple[float, float], options: dict[str, Any], seed: int,
    result: _Sample,
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
        result.skipped = f"eager raised {type(exc).__name__}: {_one_line(str(exc), 120)}"
        return
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
        _compare(actual, expected, tol, f"{what} output", values, exact=lambda: call(*upcast(tensors)))
        result.fwd_ok = True
        if not outs:
            return
        what = "bwd"
        result.bwd_checked = True
        outs_c = differentiable(actual)
        if len(outs_c) != len(outs):
            raise _Mismatch(f"bwd: {len(outs_c)} differentiable outputs, eager has {len(outs)}")
        grads_c = torch.autograd.grad(outs_c, [compiled_in[i] for i in wrt], cotangents, allow_unused=True)
        for gc, ge, i in zip(grads_c, grads, wrt):
            gc = torch.zeros_like(compiled_in[i]) if gc is None else gc
            ge = torch.zeros_like(eager_in[i]) if ge is None else ge
            _compare(gc, ge, (tol[0], tol[1] * 10), f"bwd grad of input {i}", values)
        result.bwd_ok = True
    except _Mismatch as exc:
        result.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - any exception under compile is a failure to report
        exc = _unwrap(exc)
        result.error = f"{what} raised {type(exc).__name__}: {_one_line(str(exc))}"


def _unwrap(exc: BaseException) -> BaseException:
    """The backend's own exception inside dynamo's ``BackendCompilerFailed``."""
    while isinstance(exc, torch._dynamo.exc.BackendCompilerFailed) and exc.inner_exception is not None:
        exc = exc.inner_exception
    return exc


def _fallbacks(caught: Iterable[warnings.WarningMessage]) -> dict[str, str]:
    found: dict[str, str] = {}
    for w in caught:
        if issubclass(w.category, FallbackWarning):
            match = _FALLBACK.match(str(w.message))
            if match:
                found.setdefault(match.group(1), match.group(2))
            else:
                found.setdefault("<graph>", str(w.message))
    return found


# -- running one case -----------------------------------------------------------------------------


@attrs.frozen
class OpResult:
    """One row of a report: a case at one dtype, how its samples went and why."""

    op: str
    dtype: str
    status: str
    targets: tuple[str, ...]
    samples: int = 0
    fwd_checked: int = 0
    fwd_ok: int = 0
    bwd_checked: int = 0
    bwd_ok: int = 0
    note: str = ""
    error: str = ""
    lowered: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()
    other_fallbacks: tuple[str, ...] = ()
    seconds: float = 0.0
    #: ids of the samples that were compared (see ``_Sample.id``), and (id, why) of those that failed
    checked_samples: tuple[str, ...] = ()
    failed_samples: tuple[tuple[str, str], ...] = ()

    @property
    def backward_checked(self) -> bool:
        return self.bwd_checked > 0

    @property
    def fwd(self) -> str:
        return f"{self.fwd_ok}/{self.fwd_checked}" if self.fwd_checked else "-"

    @property
    def bwd(self) -> str:
        return f"{self.bwd_ok}/{self.bwd_checked}" if self.bwd_checked else "-"


def _tolerance(dtype: torch.dtype, tolerances: dict[torch.dtype, tuple[float, float]] | None) -> tuple[float, float]:
    table = {**TOLERANCES, **(tolerances or {})}
    if dtype in table:
        return table[dtype]
    return (0.0, 0.0) if not (dtype.is_floating_point or dtype.is_complex) else TOLERANCES[torch.float32]


def _wants_backward(case: OpCase, backward: bool | Collection[str]) -> bool:
    if case.backward_only:
        return True
    if isinstance(backward, bool):
        return backward
    return case.name in backward or (case.opinfo is not None and case.opinfo.name in backward)


def _seed(name: str, seed: int) -> int:
    return (zlib.crc32(name.encode()) + seed) % (2**31)


#: kwargs that switch randomness off when zero: only such samples of a random op are compared
_RANDOMNESS_KWARGS = ("dropout_p", "p")


def _deterministic(sample: Any) -> bool:
    return any(sample.kwargs.get(name, None) == 0 for name in _RANDOMNESS_KWARGS)


def _samples(opinfo: Any, dtype: torch.dtype, requires_grad: bool, count: int, seed: int) -> list[Any]:
    """The first ``count`` samples (among the first 64)."""
    torch.manual_seed(seed)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n, sample in enumerate(opinfo.sample_inputs("cpu", dtype, requires_grad=requires_grad)):
            if len(out) >= count or n >= 64:
                break
            out.append(sample)
    return out


def run_case(
    case: OpCase,
    *,
    dtype: torch.dtype = torch.float32,
    max_samples: int = 3,
    backward: bool | Collection[str] = True,
    backward_samples: int = 1,
    inference_for_backward_samples: bool = True,
    search_samples: int = 4,
    tolerances: dict[torch.dtype, tuple[float, float]] | None = None,
    cache_dir: str | Path | None = None,
    options: dict[str, Any] | None = None,
    time_budget: float | None = 60.0,
    seed: int = 0,
) -> OpResult:
    """Run one case at one dtype and classify it (see the module docstring).

    The first ``max_samples`` OpInfo samples are compiled as inference graphs (inputs without
    ``requires_grad``) and their outputs compared. If ``backward`` is true or names the case, the
    first ``backward_samples`` samples are also compiled with ``requires_grad`` inputs, and
    their outputs and gradients (for a seeded random cotangent) compared; with
    ``inference_for_backward_samples=False`` those samples skip the inference run (one compile
    per sample instead of two: their forward is still compared, from the training graph).
    If none of those runs reaches a target overload (e.g. ``matmul``'s first samples are
    vectors, which dispatch to ``dot``), up to ``search_samples`` further samples are tried,
    one at a time, until one does.

    In the result, ``fwd`` counts compiled runs whose outputs were compared (inference and
    training), ``bwd`` runs whose gradients were. ``time_budget`` (seconds) stops taking new
    runs once spent. ``cache_dir`` is the kernel cache (a fresh temporary directory if
    ``None``); ``options`` are extra ``torch.compile`` options for the backend (e.g.
    ``{"runtime": "xla"}``).
    """
    start = time.monotonic()
    dtype_name = str(dtype).removeprefix("torch.")
    row = dict(op=case.name, dtype=dtype_name, targets=case.targets)

    def done(status: str, note: str, **fields: Any) -> OpResult:
        return OpResult(status=status, note=note, seconds=time.monotonic() - start, **row, **fields)

    opinfo = case.opinfo
    if opinfo is None:
        return done("skip", f"no OpInfo covers {', '.join(case.targets)}")
    if dtype not in opinfo.supported_dtypes("cpu"):
        return done("skip", f"OpInfo does not support {dtype_name}")
    random = [t for t in case.targets if _is_random(t)]
    seed = _seed(case.name, seed)
    tol = _tolerance(dtype, tolerances)
    want_bwd = (
        _wants_backward(case, backward)
        and backward_samples > 0
        and dtype in opinfo.supported_backward_dtypes("cpu")
    )
    try:
        fwd = _samples(opinfo, dtype, False, max_samples + search_samples, seed)
        extra_bwd = search_samples if case.backward_only else 0
        bwd = _samples(opinfo, dtype, True, backward_samples + extra_bwd, seed) if want_bwd else []
    except Exception as exc:  # noqa: BLE001
        return done("skip", f"OpInfo samples raised {type(exc).__name__}: {_one_line(str(exc), 120)}")
    if not fwd and not bwd:
        return done("skip", f"OpInfo has no {dtype_name} samples")

    deadline = None if time_budget is None else start + time_budget
    results: list[_Sample] = []
    runs, search = [], []
    for j in range(max(len(fwd), len(bwd))):
        if j < min(len(bwd), backward_samples):
            runs.append((j, bwd[j], True))
        elif case.backward_only and j < len(bwd):
            search.append((j, bwd[j], True))
        if j < min(len(fwd), max_samples) and (j >= len(bwd) or inference_for_backward_samples):
            runs.append((j, fwd[j], False))
        elif j >= max_samples and not case.backward_only and j < len(fwd):
            search.append((j, fwd[j], False))
    truncated = False
    with _cache_dir(cache_dir) as cache, _observing() as observer, _traceable_opinfo_wrappers(), _quiet_torch_logs():
        opts = {"nkipy_cache": str(cache), **(options or {})}
        for i, (index, sample, is_bwd) in enumerate(runs + search):
            if deadline is not None and time.monotonic() > deadline and results:
                truncated = True
                break
            if i >= len(runs) and (observer.seen & set(case.targets) or any(r.error for r in results)):
                break  # the search for a sample that reaches the op is over
            result = _Sample(index=index, grad=is_bwd, values=not random or _deterministic(sample))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                _run_sample(
                    opinfo, sample, backward=is_bwd, tol=tol, options=opts, seed=seed + i, result=result
                )
            result.fallbacks = _fallbacks(caught)
            results.append(result)
        torch._dynamo.reset()
    return _classify(case, results, observer.seen, truncated, done)


def _is_random(overload: str) -> bool:
    try:
        from ..registry import resolve_op

        return torch.Tag.nondeterministic_seeded in resolve_op(overload).tags
    except (AttributeError, ValueError):
        return False


def _classify(case: OpCase, results: list[_Sample], seen: set[str], truncated: bool, done) -> OpResult:
    packets = {_packet(t) for t in case.targets}
    fallbacks: dict[str, str] = {}
    others: dict[str, str] = {}
    for r in results:
        for op, why in r.fallbacks.items():
            (fallbacks if _packet(op) in packets else others).setdefault(op, why)
    lowered = tuple(sorted(t for t in case.targets if t in seen and t not in fallbacks))
    counts = dict(
        samples=len({r.index for r in results if not r.skipped}),
        fwd_checked=sum(r.fwd_checked for r in results),
        fwd_ok=sum(r.fwd_ok for r in results),
        bwd_checked=sum(r.bwd_checked for r in results),
        bwd_ok=sum(r.bwd_ok for r in results),
        lowered=lowered,
        fallbacks=tuple(f"{op}: {why}" for op, why in sorted(fallbacks.items())),
        other_fallbacks=tuple(sorted(others)),
        checked_samples=tuple(r.id for r in results if r.fwd_checked),
        failed_samples=tuple((r.id, r.failure()) for r in results if r.failure()),
    )
    budget = " (time budget reached)" if truncated else ""
    # mismatches and exceptions first; then rules that raised (a bug wherever they sit in the graph)
    failing = [r for r in results if r.error] + [r for r in results if not r.error and r.failure()]
    if failing:
        message = failing[0].failure()
        return done("fail", message + budget, error=message, **counts)
    if not any(r.fwd_ok or r.bwd_ok for r in results):
        skips = [r.skipped for r in results if r.skipped]
        return done("skip", (skips[0] if skips else "no sample had anything to compare") + budget, **counts)
    if fallbacks:
        op, why = sorted(fallbacks.items())[0]
        more = f" (+{len(fallbacks) - 1} more)" if len(fallbacks) > 1 else ""
        return done("fallback", _one_line(f"{op}: {why}{more}") + budget, **counts)
    if not lowered:
        ran = sorted(seen) or ["nothing"]
        return done(
            "skip",
            _one_line(f"samples never reach {', '.join(case.targets)} (graphs had {', '.join(ran[:6])})") + budget,
            **counts,
        )
    notes = [f"also on CPU: {', '.join(sorted(others))}"] if others else []
    shape_only = sum(1 for r in results if not r.values and (r.fwd_ok or r.bwd_ok))
    if shape_only:
        notes.append(f"random: {shape_only} run(s) compared by shape and dtype only")
    return done("pass", _one_line("; ".join(notes) + budget), **counts)


# -- reports --------------------------------------------------------------------------------------


def _shorten(text: str, width: int | None) -> str:
    return text if width is None or len(text) <= width else text[: width - 3] + "..."


@attrs.frozen
class ConformanceReport:
    """Rows of a conformance run; ``table()`` renders them, ``summary()`` counts them."""

    rows: tuple[OpResult, ...]
    lowered_ops: tuple[str, ...] = ()
    seconds: float = 0.0

    def by_status(self, status: str) -> list[OpResult]:
        return [r for r in self.rows if r.status == status]

    def failures(self) -> list[OpResult]:
        return self.by_status("fail")

    def summary(self) -> dict[str, int]:
        """``{"pass": n, "fallback": n, "fail": n, "skip": n}``."""
        return {status: len(self.by_status(status)) for status in STATUSES}

    def verified_ops(self) -> list[str]:
        """Lowered overloads that some passing row exercised through a kernel."""
        return sorted({op for r in self.rows if r.status == "pass" for op in r.lowered})

    def unverified_ops(self) -> list[str]:
        return sorted(set(self.lowered_ops) - set(self.verified_ops()))

    def summary_line(self) -> str:
        counts = ", ".join(f"{n} {s}" for s, n in self.summary().items())
        verified = f"; {len(self.verified_ops())}/{len(self.lowered_ops)} lowered overloads verified" if self.lowered_ops else ""
        return f"{len(self.rows)} rows: {counts}{verified} ({self.seconds:.1f}s)"

    def table(self, note_width: int | None = 100, op_width: int | None = 42, summary: bool = True) -> str:
        """A fixed-width text table: op, dtype, status, samples, fwd, bwd, note, then the summary.

        ``samples`` is how many OpInfo samples ran; ``fwd`` compiled runs whose outputs matched /
        were compared; ``bwd`` the same for gradients (``-``: not checked). Longer ops and notes
        are shortened to ``op_width``/``note_width`` (``None``: never).
        """
        header = ("op", "dtype", "status", "samples", "fwd", "bwd", "note")
        lines = []
        for r in self.rows:
            lines.append((
                _shorten(r.op, op_width), r.dtype, r.status, str(r.samples), r.fwd, r.bwd, _shorten(r.note, note_width)
            ))
        widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)]
        widths[-1] = 0

        def fmt(cells: Sequence[str]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

        out = [fmt(header), fmt(["-" * w if w else "----" for w in widths])]
        out.extend(fmt(line) for line in lines)
        if summary:
            out.append(self.summary_line())
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()


def run_conformance(
    target: str | Iterable[Any],
    *,
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    max_samples: int = 3,
    backward: bool | Collection[str] = True,
    backward_samples: int = 1,
    inference_for_backward_samples: bool = True,
    search_samples: int = 4,
    include: Collection[str] | None = None,
    exclude: Collection[str] = (),
    op_budget: float | None = 60.0,
    budget: float | None = None,
    tolerances: dict[torch.dtype, tuple[float, float]] | None = None,
    cache_dir: str | Path | None = None,
    options: dict[str, Any] | None = None,
    seed: int = 0,
    progress: Callable[[OpResult], None] | None = None,
) -> ConformanceReport:
    """Run every case of ``target`` (a distribution name or ATen overloads) at every dtype.

    The sampling options are ``run_case``'s.

    ``backward`` is ``True``/``False`` or a collection of case/OpInfo names to run backward
    for (cases whose targets only occur in backward graphs always run it). ``op_budget`` is the
    time budget per row and ``budget`` the whole run's: once spent, remaining rows are ``skip``.
    One kernel cache (``cache_dir``, default a temporary directory) serves the whole run; dynamo
    is reset between samples and cases, and warnings other than nkipy's are silenced.
    ``progress`` is called with each row as it completes.
    """
    start = time.monotonic()
    cases = conformance_cases(target, include=include, exclude=exclude)
    ops = sorted({op for case in cases for op in case.targets})
    rows: list[OpResult] = []
    with _cache_dir(cache_dir) as cache:
        for case in cases:
            for dtype in dtypes:
                if budget is not None and time.monotonic() - start > budget:
                    row = OpResult(case.name, str(dtype).removeprefix("torch."), "skip", case.targets,
                                   note="time budget of the run exhausted")
                else:
                    remaining = None if budget is None else max(0.0, budget - (time.monotonic() - start))
                    per_op = op_budget if remaining is None else min(op_budget or math.inf, remaining)
                    row = run_case(
                        case, dtype=dtype, max_samples=max_samples, backward=backward,
                        backward_samples=backward_samples,
                        inference_for_backward_samples=inference_for_backward_samples,
                        search_samples=search_samples,
                        tolerances=tolerances, cache_dir=cache,
                        options=options, time_budget=per_op, seed=seed,
                    )
                rows.append(row)
                if progress is not None:
                    progress(row)
    return ConformanceReport(tuple(rows), tuple(ops), time.monotonic() - start)


def assert_conformance(
    report: ConformanceReport | OpResult,
    *,
    allow_fallback: bool = True,
    allow_skip: bool = True,
    expected_failures: ExpectedFailures | None = None,
) -> None:
    """Raise ``AssertionError`` listing the rows that are not acceptable.

    ``fail`` rows always are, unless every failing sample of the row is listed in
    ``expected_failures`` (usually ``ExpectedFailures.read`` of a checked-in file, see
    ``expected_failures.py``); a listed sample that ran and passed, or whose row the run no longer
    has, is reported too, so that the file says what fails today.
    ``fallback`` and ``skip`` rows are acceptable unless ``allow_fallback``/``allow_skip`` is false.
    """
    __tracebackhide__ = True
    if isinstance(report, OpResult):
        report = ConformanceReport((report,))
    expected = expected_failures or ExpectedFailures()
    bad = [
        row for row in report.rows
        if (row.status == "fail" and any((row.op, row.dtype, s) not in expected.reasons for s, _ in row.failed_samples))
        or (row.status == "fallback" and not allow_fallback)
        or (row.status == "skip" and not allow_skip)
    ]
    lines = []
    if bad:
        lines.append(f"{len(bad)} conformance row(s) not acceptable:")
        lines.append(ConformanceReport(tuple(bad)).table(note_width=None, op_width=None, summary=False))
    lines.extend(expected.compare(report).lines())
    if lines:
        raise AssertionError("\n".join(lines))


def check_case(case: OpCase, *, allow_fallback: bool = True, allow_skip: bool = True, **kwargs: Any) -> OpResult:
    """``run_case`` then ``assert_conformance`` on its row (for a test per case)."""
    row = run_case(case, **kwargs)
    assert_conformance(row, allow_fallback=allow_fallback, allow_skip=allow_skip)
    return row
