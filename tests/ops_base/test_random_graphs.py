"""Random chains of lowered ops, compiled vs eager: the op mixtures no hand-written test thought of.

Hypothesis draws a program of 2-6 steps from ``OPS`` (elementwise, broadcasting binary, reduction
and shape ops of nkipy-ops-base), an input shape, a dtype and, per binary step, a second operand
whose shape broadcasts against the value so far (sometimes widening it, sometimes of another dtype,
so that type promotion is exercised too). The program runs eagerly and through
``torch.compile(backend="nkipy", options={"strict": True})`` (every op must lower: a fallback is an
error), and the results must agree within the dtype's tolerance. A failing example prints as the
program it is, e.g.::

    x: bfloat16[3, 1, 4], seed 0
    v = torch.sin(x)
    v = v + y1  # y1: float32[4]
    v = v.sum(dim=-1, keepdim=True)

The example count is bounded and derandomized (no example database) so CI sees the same programs
on every run, and failing examples are not shrunk (each try compiles; shrinking took minutes); raise
``DTYPES``' example counts locally to search harder.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from nkipy_core.testing.conformance import TOLERANCES

FLOAT, INT = "float", "int"


@attrs.frozen
class Op:
    """One step: ``text`` formats it (``{v}`` the value, ``{y}`` the operand, ``{d}`` the dim)."""

    text: str
    fn: Callable[..., torch.Tensor]
    kinds: frozenset[str]
    binary: bool = False
    dim: bool = False  # takes a dimension of the value (so the value needs rank >= 1)
    smooth: bool = True  # continuous: a one-ulp difference upstream stays small downstream

    def applies(self, v: torch.Tensor, first: bool) -> bool:
        """Whether it can follow value ``v``: a discontinuous op only on exact values (the inputs,
        integers), where no upstream rounding difference can flip its result."""
        kind = FLOAT if v.dtype.is_floating_point else INT
        exact = first or kind == INT
        return kind in self.kinds and (v.dim() >= 1 or not self.dim) and (self.smooth or exact)

    def __call__(self, v: torch.Tensor, y: torch.Tensor | None, dim: int | None) -> torch.Tensor:
        return self.fn(v, *([y] if self.binary else []), *([dim] if self.dim else []))


BOTH, FLOATS, INTS = frozenset({FLOAT, INT}), frozenset({FLOAT}), frozenset({INT})

OPS = [
    # elementwise, one operand
    Op("-{v}", torch.neg, BOTH),
    Op("torch.abs({v})", torch.abs, BOTH),
    Op("torch.relu({v})", torch.relu, BOTH),
    Op("{v} * {v}", lambda v: v * v, BOTH),
    Op("{v} * 3 - 1", lambda v: v * 3 - 1, BOTH),
    Op("torch.sin({v})", torch.sin, FLOATS),
    Op("torch.cos({v})", torch.cos, FLOATS),
    Op("torch.tanh({v})", torch.tanh, FLOATS),
    Op("torch.sigmoid({v})", torch.sigmoid, FLOATS),
    Op("torch.exp({v})", torch.exp, FLOATS),
    Op("torch.erf({v})", torch.erf, FLOATS),
    Op("torch.log1p(torch.abs({v}))", lambda v: torch.log1p(torch.abs(v)), FLOATS),
    Op("torch.sqrt(torch.abs({v}))", lambda v: torch.sqrt(torch.abs(v)), FLOATS),
    Op("torch.rsqrt(torch.abs({v}) + 1)", lambda v: torch.rsqrt(torch.abs(v) + 1), FLOATS),
    Op("F.gelu({v})", torch.nn.functional.gelu, FLOATS),
    Op("torch.floor({v})", torch.floor, FLOATS, smooth=False),
    Op("torch.sign({v})", torch.sign, BOTH, smooth=False),
    Op("torch.round({v})", torch.round, FLOATS, smooth=False),
    Op("torch.clamp({v}, -1, 2)", lambda v: torch.clamp(v, -1, 2), BOTH),
    Op("torch.pow({v}, 3)", lambda v: torch.pow(v, 3), BOTH),
    Op("{v}.to(torch.float32)", lambda v: v.to(torch.float32), BOTH),
    Op("{v}.to(torch.bfloat16)", lambda v: v.to(torch.bfloat16), BOTH, smooth=False),
    Op("({v} > 0).to({v}.dtype)", lambda v: (v > 0).to(v.dtype), BOTH, smooth=False),
    Op("torch.bitwise_not({v})", torch.bitwise_not, INTS),
    # elementwise, two operands (the second broadcasts)
    Op("{v} + {y}", torch.add, BOTH, binary=True),
    Op("{v} - {y}", torch.sub, BOTH, binary=True),
    Op("{v} * {y}", torch.mul, BOTH, binary=True),
    Op("{v} / ({y}.abs() + 1)", lambda v, y: v / (y.abs() + 1), BOTH, binary=True),
    Op("torch.maximum({v}, {y})", torch.maximum, BOTH, binary=True),
    Op("torch.minimum({v}, {y})", torch.minimum, BOTH, binary=True),
    Op(
        "torch.where({v} > {y}, {v}, {y})", lambda v, y: torch.where(v > y, v, y), BOTH, binary=True
    ),
    Op("torch.atan2({v}, {y})", torch.atan2, FLOATS, binary=True),
    Op(
        "torch.remainder({v}, {y}.abs() + 1)",
        lambda v, y: torch.remainder(v, y.abs() + 1),
        INTS,
        binary=True,
    ),
    Op("{v} // ({y}.abs() + 1)", lambda v, y: v // (y.abs() + 1), INTS, binary=True),
    Op("{v} & {y}", torch.bitwise_and, INTS, binary=True),
    Op("{v} ^ {y}", torch.bitwise_xor, INTS, binary=True),
    # reductions and scans along a dim
    Op("{v}.sum(dim={d}, keepdim=True)", lambda v, d: v.sum(dim=d, keepdim=True), BOTH, dim=True),
    Op("{v}.sum(dim={d})", lambda v, d: v.sum(dim=d), BOTH, dim=True),
    Op("{v}.amax(dim={d})", lambda v, d: v.amax(dim=d), BOTH, dim=True),
    Op("{v}.amin(dim={d}, keepdim=True)", lambda v, d: v.amin(dim=d, keepdim=True), BOTH, dim=True),
    Op("{v}.mean(dim={d})", lambda v, d: v.mean(dim=d), FLOATS, dim=True),
    Op("{v}.prod(dim={d})", lambda v, d: v.prod(dim=d), BOTH, dim=True),
    Op("{v}.max(dim={d}).values", lambda v, d: v.max(dim=d).values, BOTH, dim=True),
    Op("{v}.var(dim={d}, correction=0)", lambda v, d: v.var(dim=d, correction=0), FLOATS, dim=True),
    Op("torch.softmax({v}, dim={d})", lambda v, d: torch.softmax(v, dim=d), FLOATS, dim=True),
    Op(
        "torch.log_softmax({v}, dim={d})",
        lambda v, d: torch.log_softmax(v, dim=d),
        FLOATS,
        dim=True,
    ),
    Op("torch.cumsum({v}, dim={d})", lambda v, d: torch.cumsum(v, dim=d), BOTH, dim=True),
    # shape ops
    Op("{v}.transpose(0, {d})", lambda v, d: v.transpose(0, d), BOTH, dim=True),
    Op(
        "{v}.permute(*reversed(range({v}.dim())))",
        lambda v: v.permute(tuple(reversed(range(v.dim())))),
        BOTH,
    ),
    Op("{v}.flip({d})", lambda v, d: v.flip(d), BOTH, dim=True),
    Op(
        "{v}.unsqueeze(0).expand(2, *{v}.shape)", lambda v: v.unsqueeze(0).expand(2, *v.shape), BOTH
    ),
    Op("{v}.reshape(-1)", lambda v: v.reshape(-1), BOTH),
    Op("{v}.narrow({d}, 0, 1)", lambda v, d: v.narrow(d, 0, 1), BOTH, dim=True),
    Op("torch.cat([{v}, {v}], dim={d})", lambda v, d: torch.cat([v, v], dim=d), BOTH, dim=True),
]

DTYPES = {
    torch.float32: 30,
    torch.bfloat16: 30,
    torch.float16: 20,
    torch.int32: 20,
}  # dtype -> examples


@attrs.frozen
class Step:
    op: Op
    dim: int | None = None
    operand: int | None = None  # index into Program.operands


@attrs.frozen
class Program:
    shape: tuple[int, ...]
    dtype: torch.dtype
    seed: int
    steps: tuple[Step, ...]
    operands: tuple[tuple[tuple[int, ...], torch.dtype], ...]

    def inputs(self) -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed)
        return [_tensor(s, d, generator) for s, d in ((self.shape, self.dtype), *self.operands)]

    def __call__(self, x: torch.Tensor, *ys: torch.Tensor) -> torch.Tensor:
        v = x
        for step in self.steps:
            v = step.op(v, None if step.operand is None else ys[step.operand], step.dim)
        return v

    def tolerance(self, result: torch.Tensor) -> tuple[float, float]:
        """The conformance run's, for the least precise float type involved (exact for integers):
        torch rounds after every op and so must the kernels, so chains do not widen it."""
        dtypes = {self.dtype, result.dtype, *(d for _, d in self.operands)}
        return max((TOLERANCES[d] for d in dtypes if d in TOLERANCES), default=(0.0, 0.0))

    def __str__(self) -> str:
        lines = [f"x: {_type(self.shape, self.dtype)}, seed {self.seed}"]
        for step in self.steps:
            y = f"y{step.operand}" if step.op.binary else ""
            code = step.op.text.format(v="v" if lines[1:] else "x", y=y, d=step.dim)
            note = f"  # {y}: {_type(*self.operands[step.operand])}" if y else ""
            lines.append(f"v = {code}{note}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        """How hypothesis prints a falsifying example: as the program."""
        printer.text(str(self))


def _type(shape: tuple[int, ...], dtype: torch.dtype) -> str:
    return f"{str(dtype).removeprefix('torch.')}{list(shape)}"


def _tensor(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=generator) * 6 - 3).to(dtype)
    return torch.randint(-5, 6, shape, generator=generator, dtype=dtype)


@st.composite
def programs(draw, dtype: torch.dtype) -> Program:
    """A chain of 2-6 ops; each is drawn among those that apply to the value so far, which is
    computed as the chain grows (on small stand-in tensors: only shapes and dtypes matter here)."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=0, max_size=3)))
    v = torch.zeros(shape, dtype=dtype)
    steps, operands = [], []
    for n in range(draw(st.integers(2, 6))):
        op = draw(st.sampled_from([op for op in OPS if op.applies(v, first=n == 0)]))
        dim = draw(st.integers(-v.dim(), v.dim() - 1)) if op.dim else None
        y = None
        if op.binary:
            operands.append(draw(_operand(tuple(v.shape), v.dtype, op.kinds)))
            y = torch.zeros(operands[-1][0], dtype=operands[-1][1])
        steps.append(Step(op, dim, len(operands) - 1 if op.binary else None))
        v = op(v, y, dim)
    seed = draw(st.integers(0, 2**16))
    return Program(shape, dtype, seed, tuple(steps), tuple(operands))


@st.composite
def _operand(
    draw, shape: tuple[int, ...], dtype: torch.dtype, kinds: frozenset[str]
) -> tuple[tuple[int, ...], torch.dtype]:
    """A shape that broadcasts against ``shape``: some dims 1, leading dims dropped or one added;
    usually ``dtype``, sometimes a wider type the op takes (type promotion, integers to float too)."""
    dropped = draw(st.integers(0, len(shape)))
    dims = [1 if draw(st.booleans()) else size for size in shape][dropped:]
    lead = draw(st.sampled_from([(), (2,)])) if not dropped else ()
    wider = (
        [torch.float32]
        if dtype.is_floating_point
        else [torch.int64, *([torch.float32] if FLOAT in kinds else [])]
    )
    return (*lead, *dims), draw(st.sampled_from([dtype, dtype, *wider]))


def _check(program: Program) -> None:
    inputs = program.inputs()
    expected = program(*inputs)
    torch._dynamo.reset()  # a fresh function each example: no recompile limit, no eager fallback
    actual = torch.compile(program.__call__, backend="nkipy", options={"strict": True})(*inputs)
    rtol, atol = program.tolerance(expected)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_random_op_chains_match_eager(dtype):
    @settings(
        max_examples=DTYPES[dtype],
        derandomize=True,
        database=None,
        deadline=None,
        phases=[
            Phase.explicit,
            Phase.generate,
        ],  # no shrinking: each try compiles; 6 steps read fine
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(programs(dtype))
    def check(program: Program) -> None:
        _check(program)

    check()
