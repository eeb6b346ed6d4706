"""Differential fuzzing of the ``nkipy`` device: random layouts, aliasing and chains of ops, run
eagerly on ``nkipy`` and compiled with ``nkipy`` inputs, against torch on CPU.

Hypothesis draws a program: one to three inputs, each a tensor of a drawn shape (0-dim and
size-0 included) and dtype (f32, bf16, f16, i64, bool) laid out in its storage by a drawn recipe
(contiguous, permuted, channels-last, a slice with a step, a storage offset, expanded), then
one to four steps, each an op on values so far: elementwise and broadcasting ops, views of
views, reductions, in-place and ``out=`` forms (into strided views too), ops whose operands alias
each other (``v + v.flip(0)``, ``v.add_(v.t())``) and ops whose result depends on the layout
(``as_strided``, ``as_strided_scatter``, ``view``, ``clone``). The same program runs on CPU
tensors (the reference), eagerly on ``nkipy`` tensors, and compiled by ``backend="nkipy"`` with
the ``nkipy`` tensors as graph inputs. Every value the program returns *and every input's
storage afterwards* must agree (so a write through a view to the wrong place is seen); where
torch raises, the device must raise too.

A failing example prints as the program it is::

    x0 = laid_out(float32[4, 6], 'permuted (1, 0)')
    v1 = torch.as_strided_scatter(x0, ones(2, 2), (2, 2), (1, 2))

CI runs the ``ci`` profile: derandomized (the same programs every run), bounded by example count
(``EXAMPLES``), no shrinking of compiled examples. ``pytest --hypothesis-profile=nkipy-nightly
tests/device/test_fuzz_device.py`` searches longer (``docs/device.md``, Layouts and aliasing). A
failure it finds becomes a regression test in ``test_layouts.py``.
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Callable

import attrs
import pytest
import torch
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from nkipy_core import _torch
from nkipy_core.errors import DeviceError
from nkipy_core.testing import conformance_cases
from nkipy_core.testing.closeness import assert_close_to_eager, upcast
from nkipy_core.testing.conformance import TOLERANCES

pytest.importorskip("nkipy_ops_base")

#: examples per CI run: eager programs, compiled programs (each compiled one costs a compile),
#: OpInfo samples of the lowered ops on laid-out inputs
EXAMPLES = {"eager": 250, "fused": 150, "compiled": 30, "opinfo": 250}

settings.register_profile(
    "nkipy-nightly",
    max_examples=5000,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool]
FLOATS = (torch.float32, torch.bfloat16, torch.float16)
TOLERANCE = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-5},
    torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2},
    torch.float16: {"rtol": 2e-3, "atol": 2e-3},
}


# -- inputs: values and how they lie in their storage ------------------------------------------


@attrs.frozen
class Layout:
    """How an input's values lie in its storage; ``build`` makes the base and the view."""

    kind: str
    arg: tuple = ()

    def build(self, values: torch.Tensor) -> tuple[torch.Tensor, Callable]:
        """(a contiguous CPU base, a function making the input from a base on any device)."""
        shape = tuple(values.shape)
        if self.kind == "permuted":
            order = self.arg
            inverse = tuple(sorted(range(len(order)), key=order.__getitem__))
            return values.permute(order).contiguous(), lambda b: b.permute(inverse)
        if self.kind == "stepped":
            (dim,) = self.arg
            wide = list(shape)
            wide[dim] = 2 * shape[dim]
            base = torch.zeros(wide, dtype=values.dtype)
            base.narrow(dim, 0, 2 * shape[dim])[_step_index(len(shape), dim)] = values
            return base, lambda b: b[_step_index(len(shape), dim)]
        if self.kind == "offset":
            (offset,) = self.arg
            base = torch.zeros(values.numel() + offset, dtype=values.dtype)
            base[offset:] = values.reshape(-1)
            strides = _contiguous_strides(shape)
            return base, lambda b: b.as_strided(shape, strides, offset)
        if self.kind == "expanded":
            (dim,) = self.arg
            base = values.narrow(dim, 0, 1).clone()
            return base, lambda b: b.expand(shape)
        return values.clone(), lambda b: b

    def __str__(self) -> str:
        return f"{self.kind} {self.arg}" if self.arg else self.kind


def _step_index(rank: int, dim: int) -> tuple:
    return (slice(None),) * dim + (slice(None, None, 2),)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


@st.composite
def layouts(draw, shape: tuple[int, ...], same_values: bool = False) -> Layout:
    """A layout for a tensor of ``shape``; ``same_values``: one that keeps every value (not
    ``expanded``, which repeats a slice)."""
    rank = len(shape)
    kinds = ["contiguous", "offset"]
    if rank >= 2:
        kinds.append("permuted")
    if rank >= 1:
        kinds.append("stepped")
    if any(s > 1 for s in shape) and not same_values:
        kinds.append("expanded")
    kind = draw(st.sampled_from(kinds))
    if kind == "permuted":
        if rank == 4 and draw(st.booleans()):
            return Layout(kind, (0, 2, 3, 1))  # channels-last
        order = draw(st.permutations(range(rank)))
        return Layout(kind, tuple(order))
    if kind == "stepped":
        return Layout(kind, (draw(st.integers(0, rank - 1)),))
    if kind == "offset":
        return Layout(kind, (draw(st.integers(1, 7)),))
    if kind == "expanded":
        return Layout(kind, (draw(st.sampled_from([d for d, s in enumerate(shape) if s > 1])),))
    return Layout(kind)


def _values(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    if dtype == torch.int64:
        return torch.randint(-5, 6, shape, generator=gen)
    return (torch.randn(shape, generator=gen) * 2).to(dtype)


@attrs.frozen
class Input:
    shape: tuple[int, ...]
    dtype: torch.dtype
    layout: Layout
    seed: int

    def make(self, device: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(the storage's base tensor, the laid-out input) on ``device``."""
        base, view = self.layout.build(_values(self.shape, self.dtype, self.seed))
        base = base.to(device)
        return base, view(base)

    def __str__(self) -> str:
        dims = ", ".join(map(str, self.shape))
        return f"laid_out({str(self.dtype).removeprefix('torch.')}[{dims}], '{self.layout}')"


shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)


@st.composite
def inputs(draw, shape=None, dtype=None) -> Input:
    shape = draw(shapes) if shape is None else shape
    dtype = draw(st.sampled_from(DTYPES)) if dtype is None else dtype
    return Input(shape, dtype, draw(layouts(shape)), draw(st.integers(0, 2**16)))


# -- steps: ops on the values so far -----------------------------------------------------------


@attrs.frozen
class Step:
    """``text`` formats the step (``{0}``, ``{1}``: its operands); ``fn`` runs it."""

    text: str
    fn: Callable[..., torch.Tensor]
    operands: tuple[int, ...]

    def __call__(self, values: list[torch.Tensor]) -> torch.Tensor:
        return self.fn(*(values[i] for i in self.operands))

    def show(self, names: list[str]) -> str:
        return self.text.format(*(names[i] for i in self.operands))


def _is_float(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point


def _numeric(t: torch.Tensor) -> bool:
    return t.dtype != torch.bool


class Undefined(Exception):
    """A step whose result torch leaves to its loop order: the example says nothing."""


def _overlapping_copy(v: torch.Tensor) -> torch.Tensor:
    """``v[1:].copy_(v[:-1])``: torch refuses it when ``v`` is dense (the two overlap) and
    otherwise copies element by element, each write seen by the next read (its loop order);
    the device reads all, then writes. Only the refusal is compared."""
    dense = v.is_contiguous() or v.numel() <= 1
    if not dense and v.shape[0] > 2:
        raise Undefined(v.stride())
    return v[1:].copy_(v[:-1])


#: (text, fn, applies): steps of one operand
UNARY: list[tuple[str, Callable, Callable[[torch.Tensor], bool]]] = [
    ("-{0}", torch.neg, _numeric),
    ("torch.abs({0})", torch.abs, _numeric),
    ("{0} * 3", lambda v: v * 3, _numeric),
    ("torch.sin({0})", torch.sin, _is_float),
    ("torch.exp({0})", torch.exp, _is_float),
    ("torch.logical_not({0})", torch.logical_not, lambda v: True),
    ("{0}.to(torch.float32)", lambda v: v.to(torch.float32), lambda v: True),
    # views, and views of views
    ("{0}.t()", lambda v: v.t(), lambda v: v.dim() == 2),
    ("{0}.transpose(0, -1)", lambda v: v.transpose(0, -1), lambda v: v.dim() >= 1),
    ("{0}[::2]", lambda v: v[::2], lambda v: v.dim() >= 1),
    ("{0}.flip(0)", lambda v: v.flip(0), lambda v: v.dim() >= 1),
    ("{0}.unsqueeze(0)", lambda v: v.unsqueeze(0), lambda v: True),
    ("{0}.diagonal()", lambda v: v.diagonal(), lambda v: v.dim() >= 2),
    ("{0}.reshape(-1)", lambda v: v.reshape(-1), lambda v: True),
    ("{0}.view(-1)", lambda v: v.view(-1), lambda v: True),
    ("{0}.contiguous()", lambda v: v.contiguous(), lambda v: True),
    ("{0}.clone()", lambda v: v.clone(), lambda v: True),
    ("{0}.as_strided((2,), (1,), 1)", lambda v: v.as_strided((2,), (1,), 1), lambda v: True),
    (
        "torch.as_strided_scatter({0}, torch.ones_like({0}).flatten()[:2], (2,), (2,), 0)",
        lambda v: torch.as_strided_scatter(v, torch.ones_like(v).flatten()[:2], (2,), (2,), 0),
        lambda v: True,
    ),
    (
        "torch.as_strided_scatter({0}, torch.ones_like({0})[:2, :2], (2, 2), (1, 2))",
        lambda v: torch.as_strided_scatter(v, torch.ones_like(v)[:2, :2], (2, 2), (1, 2)),
        lambda v: v.dim() == 2,
    ),
    # reductions
    ("{0}.sum(0)", lambda v: v.sum(0), lambda v: v.dim() >= 1),
    ("{0}.amax(-1)", lambda v: v.amax(-1), lambda v: v.dim() >= 1),
    ("{0}.cumsum(0)", lambda v: v.cumsum(0), lambda v: v.dim() >= 1),
    # in place (the value is the mutated operand)
    ("{0}.mul_(2)", lambda v: v.mul_(2), _numeric),
    ("{0}.zero_()", lambda v: v.zero_(), lambda v: True),
    ("{0}.add_(1)", lambda v: v.add_(1), _numeric),
    ("{0}.neg_()", lambda v: v.neg_(), _numeric),
    # operands that alias each other
    ("{0} + {0}.flip(0)", lambda v: v + v.flip(0), lambda v: v.dim() >= 1 and _numeric(v)),
    ("{0}.add_({0}.t())", lambda v: v.add_(v.t()), lambda v: v.dim() == 2 and _numeric(v)),
    ("{0}[1:].copy_({0}[:-1])", lambda v: _overlapping_copy(v), lambda v: v.dim() >= 1),
    ("torch.neg({0}, out={0})", lambda v: torch.neg(v, out=v), _numeric),
    ("{0} @ {0}.t()", lambda v: v @ v.t(), lambda v: v.dim() == 2 and _is_float(v)),
]

#: (text, fn, applies): steps of two operands
BINARY: list[tuple[str, Callable, Callable[[torch.Tensor, torch.Tensor], bool]]] = [
    ("{0} + {1}", torch.add, lambda a, b: True),
    ("torch.maximum({0}, {1})", torch.maximum, lambda a, b: True),
    ("torch.where({1} > 0, {0}, {1})", lambda a, b: torch.where(b > 0, a, b), lambda a, b: True),
    ("{0}.add_({1})", lambda a, b: a.add_(b), lambda a, b: True),
    ("{0}.copy_({1})", lambda a, b: a.copy_(b), lambda a, b: True),
    ("torch.mul({0}, {1}, out={0})", lambda a, b: torch.mul(a, b, out=a), lambda a, b: True),
    ("torch.add({0}, 1, out={1})", lambda a, b: torch.add(a, 1, out=b), lambda a, b: True),
]


def _meta(v: torch.Tensor) -> torch.Tensor:
    """A CPU stand-in for ``v`` that ``applies`` predicates may look at (shape, dtype)."""
    return torch.empty(v.shape, dtype=v.dtype, device="meta")


@st.composite
def programs(draw) -> tuple[list[Input], list[Step]]:
    first = draw(inputs())
    ins = [first]
    for _ in range(draw(st.integers(0, 2))):
        # a second input of a shape that broadcasts with the first, or of its own
        shape = draw(st.sampled_from([first.shape, first.shape[1:], first.shape[-1:], ()]))
        ins.append(draw(inputs(shape=shape)))
    metas = [_meta(_values(i.shape, i.dtype, 0)) for i in ins]
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, 4))):
        if len(metas) > 1 and draw(st.booleans()):
            a, b = draw(st.permutations(range(len(metas))))[:2]
            choices = [(t, f) for t, f, ok in BINARY if ok(metas[a], metas[b])]
            operands: tuple[int, ...] = (a, b)
        else:
            a = draw(st.integers(0, len(metas) - 1))
            choices = [(t, f) for t, f, ok in UNARY if ok(metas[a])]
            operands = (a,)
        text, fn = draw(st.sampled_from(choices))
        step = Step(text, fn, operands)
        try:
            metas.append(step(metas))
        except Exception:  # noqa: BLE001 - torch refuses it: the program stops here, as torch does
            steps.append(step)
            break
        steps.append(step)
    return ins, steps


def show(ins: list[Input], steps: list[Step]) -> str:
    names = [f"x{i}" for i in range(len(ins))]
    lines = [f"{n} = {i}" for n, i in zip(names, ins)]
    for step in steps:
        names.append(f"v{len(names)}")
        lines.append(f"{names[-1]} = {step.show(names)}")
    return "\n".join(lines)


# -- running and comparing ---------------------------------------------------------------------


def _program(steps: list[Step]) -> Callable[..., list[torch.Tensor]]:
    def program(*values: torch.Tensor) -> list[torch.Tensor]:
        values_ = list(values)
        for step in steps:
            values_.append(step(values_))
        return values_[len(values) :]

    return program


def _run(fn, ins: list[Input], device: str):
    """(the outputs, the bases afterwards) or the exception torch raised."""
    made = [i.make(device) for i in ins]
    bases = [b for b, _ in made]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            outs = fn(*(v for _, v in made))
        except Exception as exc:  # noqa: BLE001 - compared with the reference's error
            return exc
    return [o.cpu() for o in outs], [b.cpu() for b in bases]


def _compare(actual, expected, where: str, program: str) -> None:
    if isinstance(expected, Exception):
        assert isinstance(actual, Exception), (
            f"{where}: torch on CPU raises {type(expected).__name__}: "
            f"{str(expected).splitlines()[0] if str(expected) else ''}\n"
            f"but the device returns a result:\n{program}"
        )
        return
    assert not isinstance(actual, Exception), (
        f"{where}: raises {type(actual).__name__}: {actual}\nwhere torch on CPU does not:\n{program}"
    )
    for kind, got, want in (
        ("output", *[actual[0], expected[0]]),
        ("input storage", actual[1], expected[1]),
    ):
        for n, (a, e) in enumerate(zip(got, want, strict=True)):
            assert (a.shape, a.dtype) == (e.shape, e.dtype), (
                f"{where}: {kind} {n} is {a.dtype}{list(a.shape)}, torch's {e.dtype}{list(e.shape)}"
                f"\n{program}"
            )
            tol = TOLERANCE.get(e.dtype, {"rtol": 0, "atol": 0})
            try:
                torch.testing.assert_close(a, e, equal_nan=True, **tol)
            except AssertionError as exc:
                raise AssertionError(f"{where}: {kind} {n} differs:\n{program}\n{exc}") from None


def _half_chain(ins: list[Input], steps: list[Step]) -> bool:
    """Whether half-float rounding differences may grow past the tolerance (exp of exp...)."""
    return len(steps) > 2 and any(i.dtype in (torch.bfloat16, torch.float16) for i in ins)


def _settings(examples: int):
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def _reference(program):
    """(the program's text, its function, torch's result on CPU or torch's error)."""
    ins, steps = program
    fn = _program(steps)
    return show(ins, steps), fn, _run(fn, ins, "cpu")


@_settings(EXAMPLES["eager"])
@given(programs())
def test_eager_programs_on_device_match_cpu(program):
    text, fn, expected = _reference(program)
    if isinstance(expected, Undefined):
        return
    if not isinstance(expected, Exception) and _half_chain(*program):
        return
    _compare(_run(fn, program[0], "nkipy"), expected, "eager on nkipy", text)


@_settings(EXAMPLES["fused"])
@given(programs())
def test_fused_eager_programs_equal_per_op_eager_bit_for_bit(program):
    """The queued ops of a program run as one kernel give per-op eager's numbers exactly (each
    op rounds as alone, views and writes land as they would one by one)."""
    text, fn, expected = _reference(program)
    if isinstance(expected, (Undefined, Exception)):
        return
    fused = _run(fn, program[0], "nkipy")
    torch.use_deterministic_algorithms(True)  # one kernel per op
    try:
        per_op = _run(fn, program[0], "nkipy")
    finally:
        torch.use_deterministic_algorithms(False)
    assert not isinstance(per_op, Exception), f"per-op eager raises {per_op!r}:\n{text}"
    assert not isinstance(fused, Exception), f"fused eager raises {fused!r}:\n{text}"
    for kind, got, want in (
        ("output", fused[0], per_op[0]),
        ("input storage", fused[1], per_op[1]),
    ):
        for n, (a, e) in enumerate(zip(got, want, strict=True)):
            assert (a.shape, a.dtype) == (e.shape, e.dtype), f"{kind} {n}:\n{text}"
            torch.testing.assert_close(
                a, e, rtol=0, atol=0, equal_nan=True, msg=f"{kind} {n}:\n{text}"
            )


@_settings(EXAMPLES["compiled"])
@given(programs())
def test_compiled_programs_with_device_inputs_match_cpu(program):
    text, fn, expected = _reference(program)
    if isinstance(expected, Exception) or _half_chain(*program):
        return  # errors at trace time differ in type from eager's; eager covers them
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="nkipy", dynamic=False)
    _compare(_run(compiled, program[0], "nkipy"), expected, "compiled with nkipy inputs", text)


# -- every op the packs lower, on laid-out inputs ----------------------------------------------

#: OpInfos whose results are random or undefined (their values cannot be compared)
_UNCOMPARABLE = ("rand", "normal", "dropout", "bernoulli", "multinomial", "uniform", "empty")
#: OpInfos whose index outputs pick one of several equal elements (ties): only values compared
_TIES = (
    "topk", "sort", "argsort", "kthvalue", "max", "min", "argmax", "argmin", "mode", "median",
    "nanmedian", "msort", "cummax", "cummin",
)  # fmt: skip


@functools.cache
def _opinfos() -> list:
    """The OpInfos that reach a rule of the installed packs (the conformance cases)."""
    return [
        case.opinfo
        for case in conformance_cases("nkipy-ops-base")
        if case.opinfo is not None and not any(w in case.opinfo.name for w in _UNCOMPARABLE)
    ]


@attrs.frozen
class OpSample:
    name: str
    opinfo: object = attrs.field(repr=False)
    dtype: torch.dtype = torch.float32
    index: int = 0
    layouts: tuple[Layout, ...] = ()

    def __str__(self) -> str:
        return (
            f"{self.name} sample {self.index} in {self.dtype}, "
            f"tensors laid out {[str(x) for x in self.layouts]}"
        )


def _opinfo_sample(opinfo, dtype: torch.dtype, index: int):
    torch.manual_seed(index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = list(itertools.islice(opinfo.sample_inputs("cpu", dtype), index + 1))
    return samples[index] if len(samples) > index else None


def _tensors(sample) -> list[torch.Tensor]:
    leaves = _torch.tree_leaves((sample.input, tuple(sample.args), dict(sample.kwargs)))
    return [t for t in leaves if isinstance(t, torch.Tensor)]


@st.composite
def op_samples(draw) -> OpSample:
    opinfo = draw(st.sampled_from(_opinfos()))
    dtypes = [d for d in DTYPES if d in opinfo.supported_dtypes("cpu")]
    assume(dtypes)
    dtype = draw(st.sampled_from(dtypes))
    index = draw(st.integers(0, 3))
    sample = _opinfo_sample(opinfo, dtype, index)
    assume(sample is not None)
    # a sample that asks for dropout (scaled_dot_product_attention's dropout_p) is random too
    assume(not sample.kwargs.get("dropout_p"))
    found = tuple(draw(layouts(tuple(t.shape), same_values=True)) for t in _tensors(sample))
    return OpSample(opinfo.full_name, opinfo, dtype, index, found)


def _run_sample(case: OpSample, device: str, exact: bool = False, plain: bool = False):
    """The op's outputs on ``device`` for the sample with its tensors laid out, or the error;
    ``exact``: with half floats made float64 (the exact values ``assert_close_to_eager`` wants);
    ``plain``: with contiguous tensors."""
    sample = _opinfo_sample(case.opinfo, case.dtype, case.index)
    tensors = [upcast(t.detach()) if exact else t.detach() for t in _tensors(sample)]
    chosen = [Layout("contiguous") for _ in tensors] if plain else case.layouts
    built = [layout.build(t) for layout, t in zip(chosen, tensors)]
    made = iter(view(base.to(device)) for base, view in built)
    inp, args, kwargs = _torch.tree_map(
        lambda x: next(made) if isinstance(x, torch.Tensor) else x,
        (sample.input, tuple(sample.args), dict(sample.kwargs)),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = case.opinfo.op(inp, *args, **kwargs)  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - compared with the reference's error
            return exc
    leaves = [o for o in _torch.tree_leaves(out) if isinstance(o, torch.Tensor)]
    return [o.detach().cpu() for o in leaves], [t.detach().cpu() for t in _tensors_of(inp, args)]


def _meta_dtypes(case: OpSample) -> list[torch.dtype]:
    """The dtypes torch's own dtype function gives the op's outputs (run on meta tensors)."""
    sample = _opinfo_sample(case.opinfo, case.dtype, case.index)
    inp, args, kwargs = _torch.tree_map(
        lambda x: x.detach().to("meta") if isinstance(x, torch.Tensor) else x,
        (sample.input, tuple(sample.args), dict(sample.kwargs)),
    )
    out = case.opinfo.op(inp, *args, **kwargs)  # type: ignore[attr-defined]
    return [o.dtype for o in _torch.tree_leaves(out) if isinstance(o, torch.Tensor)]


def _tensors_of(inp, args) -> list[torch.Tensor]:
    """The sample's tensors after the op (an in-place OpInfo writes its input)."""
    return [t for t in _torch.tree_leaves((inp, args)) if isinstance(t, torch.Tensor)]


@_settings(EXAMPLES["opinfo"])
@given(op_samples())
def test_lowered_ops_on_laid_out_device_inputs_match_cpu(case):
    expected = _run_sample(case, "cpu")
    if isinstance(expected, Exception):
        return  # a sample torch refuses in this layout (OpInfo samples assume their own)
    if not case.name.startswith("as_strided"):
        # an op of the values alone: where torch's CPU kernel gives another result for the
        # same values laid out otherwise, that kernel misreads the layout (native_group_norm
        # with a strided bias does), and the values' result is the one to match
        plain = _run_sample(case, "cpu", plain=True)
        if not isinstance(plain, Exception):
            expected = plain
    actual = _run_sample(case, "nkipy")
    if isinstance(actual, DeviceError) and "cannot hold torch.complex32" in str(actual):
        return  # half-float complex results: refused by the device, with this typed error
    assert not isinstance(actual, Exception), (
        f"eager on nkipy raises {type(actual).__name__}: {actual}\nwhere torch on CPU does not: {case}"
    )
    outputs = (actual[0], expected[0])
    if case.opinfo.name.split(".")[-1] in _TIES:  # type: ignore[attr-defined]
        outputs = (actual[0][:1], expected[0][:1])
    exact = functools.cache(lambda: _run_sample(case, "cpu", exact=True))
    for kind, got, want in (("output", *outputs), ("input", actual[1], expected[1])):
        assert len(got) == len(want), f"{len(got)} {kind}s, torch's {len(want)}: {case}"
        for n, (a, e) in enumerate(zip(got, want)):
            index = 0 if kind == "output" else 1
            if kind == "output" and a.dtype != e.dtype and a.dtype == _meta_dtypes(case)[n]:
                # torch's CPU kernel and its own dtype function disagree (native_layer_norm's
                # statistics of bf16: bf16 on CPU, f32 by the function and on CUDA); the device
                # follows the function
                e = e.to(a.dtype)
            assert (a.shape, a.dtype) == (e.shape, e.dtype), (
                f"{kind} {n} is {a.dtype}{list(a.shape)}, torch's {e.dtype}{list(e.shape)}: {case}"
            )
            rtol, atol = TOLERANCES.get(e.dtype.to_real(), (0.0, 0.0))
            try:  # the conformance tolerance, times ten: a layout error is far larger
                assert_close_to_eager(
                    a, e, rtol=rtol * 10, atol=atol * 10, exact=lambda: exact()[index][n]
                )
            except AssertionError as exc:
                raise AssertionError(f"{kind} {n} differs: {case}\n{exc}") from None
