"""nkipy-ops-base rules against torch eager, one ATen call per case.

Each case runs the op's rule twice: on NumPy arrays (rules are then plain NumPy code) and traced
into a kernel that is verified, simplified and executed from its generated source, as the cpu
runtime does. Both must match torch's result in shape, dtype and value. No dynamo is involved,
so the whole table runs in a few seconds; ``test_compiled.py`` covers the torch.compile path.
"""

from __future__ import annotations

import importlib
import math
import operator

import numpy as np
import pytest
import torch
import torch.fx
from torch.utils._pytree import tree_map

from nkipy_core import LoweringContext, LoweringRegistry, Unsupported
from nkipy_core.compiler.lower import input_orders, lower_subgraph, output_orders
from nkipy_core.compiler.lowering import Layout
from nkipy_core.compiler.plan import RULE
from nkipy_core.compiler.rng import RNG_KWARG, RandomStream, key_tensor
from nkipy_core.ir import codegen
from nkipy_core.ir.types import numpy_to_torch, torch_to_numpy, value_type
from nkipy_core.testing import assert_close_to_eager, upcast
from nkipy_ops_base.plugin import RULES

aten = torch.ops.aten
#: the prim dynamo writes for ``addcmul_`` with a value (defined with dynamo's inductor prims)
FMA = importlib.import_module("torch._inductor.inductor_prims").fma
prims = torch.ops.prims
f32, bf16, i64, i32, boolean = torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool

REGISTRY = LoweringRegistry()
RULES.install(REGISTRY)

_generator = torch.Generator().manual_seed(0)


def t(*shape, dtype=f32, low=-2.0, high=2.0):
    """A deterministic random tensor; integers in ``[low, high)``, bools fair coins."""
    if dtype == boolean:
        return torch.rand(shape, generator=_generator) < 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(low), int(high), shape, generator=_generator, dtype=dtype)
    return (torch.rand(shape, generator=_generator, dtype=torch.float64) * (high - low) + low).to(
        dtype
    )


def distinct(*shape, dtype=f32):
    """Values without ties (sorting and arg-reductions are then unambiguous)."""
    return (torch.randperm(math.prod(shape), generator=_generator).reshape(shape) - 5).to(dtype)


def special(dtype=f32):
    return torch.tensor([0.0, -0.0, 1.5, -2.5, math.inf, -math.inf, math.nan, 3.0], dtype=dtype)


def case(op, *args, id=None, tol=None, values=True, **kwargs):  # noqa: A002 - pytest's name
    name = id or f"{op._schema.name.split('::')[-1]}.{op._overloadname}"
    return pytest.param(op, args, kwargs, tol, values, id=name)


def _unary_cases():
    domains = {
        "abs": (-2, 2),
        "acos": (-0.99, 0.99),
        "acosh": (1.0, 30.0),
        "asin": (-0.99, 0.99),
        "asinh": (-30, 30),
        "atan": (-5, 5),
        "atanh": (-0.99, 0.99),
        "ceil": (-5, 5),
        "cos": (-5, 5),
        "cosh": (-5, 5),
        "erf": (-3, 3),
        "exp": (-5, 5),
        "exp2": (-5, 5),
        "expm1": (-2, 2),
        "floor": (-5, 5),
        "log": (0.01, 10),
        "log10": (0.01, 10),
        "log1p": (-0.9, 5),
        "log2": (0.01, 10),
        "neg": (-2, 2),
        "reciprocal": (0.5, 4),
        "round": (-5, 5),
        "rsqrt": (0.01, 10),
        "sigmoid": (-8, 8),
        "sign": (-2, 2),
        "sin": (-5, 5),
        "sinh": (-5, 5),
        "sqrt": (0, 10),
        "tan": (-1.4, 1.4),
        "tanh": (-4, 4),
        "trunc": (-5, 5),
    }
    for name, (low, high) in domains.items():
        op = getattr(aten, name).default
        for dtype in (f32, bf16):
            yield case(op, t(3, 5, dtype=dtype, low=low, high=high), id=f"{name}-{dtype}")
    for name in (
        "abs",
        "neg",
        "sign",
        "floor",
        "trunc",
        "sin",
        "exp",
        "sqrt",
        "sigmoid",
        "reciprocal",
    ):
        yield case(
            getattr(aten, name).default,
            t(7, dtype=i64, low=0 if name == "sqrt" else -5, high=5),
            id=f"{name}-int",
        )
    yield case(aten.asinh.default, torch.tensor([1e-6, -3e-4, 1e20, -1e30]), id="asinh-extremes")
    yield case(aten.acosh.default, torch.tensor([1.0, 1.0001, 1e20]), id="acosh-extremes")
    yield case(aten.sinh.default, torch.tensor([1e-6, -3e-4, 0.0]), id="sinh-tiny")
    yield case(aten.sign.default, t(6, dtype=boolean), id="sign-bool")


def _binary_cases():
    a, b = t(4, 5), t(4, 5, low=0.5, high=2)
    for op in (aten.mul.Tensor, aten.maximum.default, aten.minimum.default, aten.atan2.default):
        yield case(op, a, b)
    yield case(aten.add.Tensor, a, t(5), alpha=2.5, id="add-alpha-broadcast")
    yield case(
        aten.add.Tensor, t(4, dtype=i32, low=-9, high=9), t(4, dtype=i64), id="add-int-promote"
    )
    yield case(aten.add.Tensor, t(3, dtype=bf16), torch.tensor(0.1), id="add-bf16-0d-f32")
    yield case(aten.add.Scalar, t(4, dtype=i64), 1.5, id="add-int-scalar-float")
    yield case(aten.add.Tensor, t(4, dtype=boolean), t(4, dtype=boolean), id="add-bool")
    yield case(aten.mul.Tensor, t(4, dtype=boolean), t(4, dtype=boolean), id="mul-bool")
    yield case(aten.sub.Tensor, a, b, alpha=3)
    yield case(aten.sub.Scalar, t(4, dtype=bf16), 0.1, id="sub-bf16-scalar")
    yield case(aten.mul.Scalar, t(4, dtype=bf16), 0.1, id="mul-bf16-scalar")
    yield case(aten.div.Tensor, a, b)
    yield case(
        aten.div.Tensor,
        t(6, dtype=i64, low=-9, high=9),
        t(6, dtype=i64, low=1, high=4),
        id="div-int-true",
    )
    for mode in ("trunc", "floor"):
        num = torch.tensor([-7, -6, -1, 0, 1, 6, 7])
        yield case(
            aten.div.Tensor_mode,
            num,
            torch.tensor([2, -3, 2, 5, -2, 4, 7]),
            rounding_mode=mode,
            id=f"div-int-{mode}",
        )
        yield case(aten.div.Tensor_mode, a * 4, b, rounding_mode=mode, id=f"div-float-{mode}")
        yield case(aten.div.Scalar_mode, num, -2, rounding_mode=mode, id=f"div-scalar-{mode}")
    yield case(aten.div.Scalar, t(4, dtype=bf16), 3.0, id="div-bf16-scalar")
    # optimizer arithmetic (torch's CPU kernels fuse the last multiply-add: within an ulp)
    for dtype in (f32, bf16):
        x, y, z = t(4, 5, dtype=dtype), t(4, 5, dtype=dtype), t(4, 5, dtype=dtype, low=0.5, high=2)
        yield case(aten.addcmul.default, x, y, z, value=-0.37, id=f"addcmul-{dtype}")
        yield case(aten.addcdiv.default, x, y, z, value=0.013, id=f"addcdiv-{dtype}")
        for weight in (0.1, 0.9):
            yield case(aten.lerp.Scalar, x, y, weight, id=f"lerp-{weight}-{dtype}")
        # dynamo's addcmul_ (fma(t1 * t2, value, self)) and add_ with a tensor alpha
        yield case(FMA, x, -0.37, z, id=f"fma-scalar-{dtype}")
        yield case(FMA, x, y, z, id=f"fma-{dtype}")
    yield case(aten.pow.Tensor_Tensor, b, a)
    yield case(aten.pow.Tensor_Scalar, a, 2)
    yield case(aten.pow.Tensor_Scalar, t(5, dtype=i64, low=-3, high=3), 3, id="pow-int")
    yield case(aten.pow.Tensor_Scalar, b, -0.5, id="pow-fractional")
    yield case(aten.pow.Scalar, 2.0, a)
    for op in (aten.remainder.Tensor, aten.fmod.Tensor):
        yield case(op, a * 3, torch.tensor([1.5, -1.5, 2.0, -0.7, 0.3]))
        yield case(
            op,
            torch.tensor([-7, -6, 5, 7]),
            torch.tensor([3, -4, -3, 2]),
            id=f"{op._schema.name[6:]}-int",
        )
    yield case(aten.remainder.Scalar, a, -1.5)
    yield case(aten.fmod.Scalar, torch.tensor([-1e-8, -5.0, 5.0]), 3.0, id="fmod-tiny")
    x, y = t(6, dtype=i32, low=-50, high=50), t(6, dtype=i32, low=-50, high=50)
    p, q = t(6, dtype=boolean), t(6, dtype=boolean)
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        yield case(getattr(aten, name).Tensor, x, y)
        yield case(getattr(aten, name).Tensor, p, q, id=f"{name}-bool")
        yield case(getattr(aten, name).Scalar, x, 6)
    yield case(aten.maximum.default, special(), torch.zeros(8), id="maximum-nan")
    for op in (aten.fmax.default, aten.fmin.default, aten.hypot.default):
        yield case(op, special(), special().flip(0))
    yield case(
        aten.hypot.default,
        torch.tensor([3e30, 0.0, -4.0]),
        torch.tensor([4e30, 0.0, 3.0]),
        id="hypot-large",
    )
    yield case(aten.fmax.default, t(5, dtype=i64), t(5, dtype=i64), id="fmax-int")


def _predicate_cases():
    a, b = t(3, 4, low=-2, high=2).round(), t(3, 4, low=-2, high=2).round()
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        yield case(getattr(aten, name).Tensor, a, b)
        yield case(getattr(aten, name).Scalar, a, 0.5)
    yield case(aten.lt.Scalar, t(4, dtype=bf16), 0.1, id="lt-bf16-scalar")
    yield case(aten.eq.Tensor, t(5, dtype=i64), t(5, dtype=f32).round(), id="eq-mixed")
    p, q = t(6, dtype=boolean), t(6, dtype=i64, low=-1, high=2)
    for name in ("logical_and", "logical_or", "logical_xor"):
        yield case(getattr(aten, name).default, p, q)
    yield case(aten.logical_not.default, q)
    yield case(aten.bitwise_not.default, t(5, dtype=i64, low=-9, high=9))
    yield case(aten.bitwise_not.default, p, id="bitwise_not-bool")
    yield case(aten.isnan.default, special())
    yield case(aten.isinf.default, special())
    yield case(aten.isinf.default, t(4, dtype=i64), id="isinf-int")
    yield case(aten.where.self, p, t(6), t(6, dtype=i64), id="where-promote")
    yield case(
        aten.where.self,
        t(3, 1, dtype=boolean),
        t(3, 4, dtype=bf16),
        torch.tensor(-math.inf),
        id="where-broadcast",
    )
    yield case(aten.clamp.default, a, -0.5, 1.0)
    yield case(aten.clamp.default, a, None, 0.25, id="clamp-max")
    yield case(aten.clamp.default, special(), -1.0, id="clamp-min-nan")
    yield case(aten.clamp.Tensor, a, b, None, id="clamp-tensor")
    yield case(aten.clamp.default, t(5, dtype=i64, low=-9, high=9), -2, 3, id="clamp-int")
    yield case(aten.round.decimals, t(6) * 10, decimals=2)


f16 = torch.float16
EXACT = (0, 0)


def _awkward(dtype):
    """Python scalars a half dtype cannot hold: rounding them to the dtype first, or not, shows."""
    tie = (
        1 + 2.0 ** (-11 if dtype == f16 else -8) + 2.0**-40
    )  # an f64 -> half cast is rounded twice
    return [0.1, 1 / 3, 1.1, 1e-3, -0.7, 65500.0, 1e-7, -2.5e4, tie]


def _scalar_cases():
    """Each rule that takes a Python scalar, on f16 and bf16, bit-exact against torch (see
    ``nkipy_ops_base.opmath`` for the rule). 64 elements: whole vectors of torch's loops, whose
    scalar tails round ``alpha·other`` differently (documented there)."""
    for dtype in (f16, bf16):
        x, y, pos = (
            t(64, dtype=dtype, low=-4, high=4),
            t(64, dtype=dtype, low=-4, high=4),
            t(64, dtype=dtype, low=0.01, high=4),
        )
        name = str(dtype)[6:]
        for s in _awkward(dtype):
            sid = f"{name}-{s:.6g}"
            for op in (
                aten.add.Tensor,
                aten.sub.Tensor,
                aten.mul.Tensor,
                aten.div.Tensor,
                aten.remainder.Scalar,
                aten.fmod.Scalar,
                aten.lt.Scalar,
                aten.eq.Scalar,
            ):
                yield case(
                    op, x, s, id=f"{op._schema.name[6:]}.{op._overloadname}-{sid}", tol=EXACT
                )
            for op in (aten.add.Scalar, aten.sub.Scalar, aten.mul.Scalar, aten.div.Scalar):
                yield case(op, y, s, id=f"{op._schema.name[6:]}.Scalar-{sid}", tol=EXACT)
            for op in (aten.add.Tensor, aten.sub.Tensor):
                yield case(op, x, y, alpha=s, id=f"{op._schema.name[6:]}-alpha-{sid}", tol=EXACT)
            yield case(
                aten.add.Tensor,
                x,
                torch.tensor(s, dtype=torch.float64),
                id=f"add-0d-f64-{sid}",
                tol=EXACT,
            )
            yield case(aten.mul.Tensor, x, torch.tensor(s), id=f"mul-0d-f32-{sid}", tol=EXACT)
            yield case(aten.mul.Tensor, torch.tensor(s), x, id=f"mul-0d-f32-first-{sid}", tol=EXACT)
            yield case(
                aten.div.Tensor, torch.tensor(s), pos, id=f"div-0d-f32-first-{sid}", tol=EXACT
            )
            for mode in ("trunc", "floor"):
                yield case(
                    aten.div.Tensor_mode,
                    x * 100,
                    s,
                    rounding_mode=mode,
                    id=f"div-{mode}-{sid}",
                    tol=EXACT,
                )
            yield case(
                aten.pow.Tensor_Scalar,
                pos,
                s if abs(s) < 100 else 7.3,
                id=f"pow.Tensor_Scalar-{sid}",
                tol=EXACT,
            )
            yield case(aten.clamp.default, x, s, None, id=f"clamp-min-{sid}", tol=EXACT)
            yield case(aten.clamp.default, x, -abs(s), abs(s), id=f"clamp-{sid}", tol=EXACT)
            yield case(
                aten.where.self,
                x > 0,
                y,
                torch.tensor(s, dtype=torch.float64),
                id=f"where-0d-f64-{sid}",
                tol=EXACT,
            )
            yield case(aten.hardtanh.default, x, -abs(s), abs(s), id=f"hardtanh-{sid}", tol=EXACT)
            yield case(aten.leaky_relu.default, x, s, id=f"leaky_relu-{sid}", tol=EXACT)
            yield case(
                aten.addmm.default,
                y[:5],
                x[:12].reshape(3, 4),
                y[:20].reshape(4, 5),
                beta=s,
                alpha=-s,
                id=f"addmm-scaled-{sid}",
                tol=EXACT,
            )
            yield case(aten.full.default, [3], s, dtype=dtype, id=f"full-{sid}", tol=EXACT)
            yield case(aten.fill.Scalar, x[:3], s, id=f"fill-{sid}", tol=EXACT)
            yield case(
                aten.scalar_tensor.default, s, dtype=dtype, id=f"scalar_tensor-{sid}", tol=EXACT
            )
            yield case(aten.constant_pad_nd.default, x[:4], [1, 2], s, id=f"pad-{sid}", tol=EXACT)
            yield case(
                aten.scatter.value,
                x[:6].reshape(2, 3),
                0,
                torch.tensor([[1, 0, 1]]),
                s,
                id=f"scatter-value-{sid}",
                tol=EXACT,
            )
            edges = (
                torch.tensor([-s, 0.0, s * 0.9999, s, s * 1.0001], dtype=torch.float64)
                .to(dtype)
                .sort()
                .values
            )
            yield case(aten.bucketize.Scalar, s, edges, id=f"bucketize-scalar-{sid}")
            yield case(
                aten.searchsorted.Scalar, edges, s, right=True, id=f"searchsorted-scalar-{sid}"
            )
        for mode in ("trunc", "floor"):  # by a tensor, the quotient is rounded to the dtype first
            num, den = t(256, dtype=dtype, low=-300, high=300), t(256, dtype=dtype, low=-3, high=3)
            yield case(
                aten.div.Tensor_mode,
                num,
                den,
                rounding_mode=mode,
                id=f"div-{mode}-tensor-{name}",
                tol=EXACT,
            )
        for s in (0.1, 1 / 3, 1.1, 1e-3, 2.5):
            yield case(aten.elu.default, x, s, 1.1, 1 / 3, id=f"elu-{name}-{s:.6g}", tol=EXACT)
            yield case(
                aten.pow.Scalar,
                s,
                t(64, dtype=dtype, low=-8, high=8),
                id=f"pow.Scalar-{name}-{s:.6g}",
                tol=EXACT,
            )
        # eps is read at f32 (opmath.py); the kernels order their arithmetic differently from ours
        # (layer norm reduces otherwise, batch norm folds into x·a + b), hence the tolerance
        for s in (1e-3, 0.1, 1 / 3):
            yield case(
                aten.native_layer_norm.default,
                t(4, 8, dtype=dtype),
                [8],
                None,
                None,
                s,
                id=f"layer_norm-eps-{name}-{s:.6g}",
            )
            yield case(
                aten._native_batch_norm_legit_no_training.default,
                t(4, 3, 4, dtype=dtype),
                None,
                None,
                t(3, dtype=dtype),
                t(3, dtype=dtype, low=0.5, high=2),
                0.1,
                s,
                id=f"batch_norm-eps-{name}-{s:.6g}",
            )
    every_f16 = torch.arange(0, 0x7C00, dtype=torch.int16).view(f16)
    exponents = every_f16[every_f16 < 50]
    yield case(
        aten.pow.Scalar, 1.1, exponents, id="pow.Scalar-1.1-every-f16-exponent-below-50", tol=EXACT
    )


def _creation_cases():
    yield case(aten.full.default, [2, 3], 1.5)
    yield case(aten.full.default, [2, 3], 7, dtype=i32, id="full-int")
    yield case(aten.full.default, [], -math.inf, id="full-0d")
    yield case(aten.full_like.default, t(2, 2), 3, dtype=bf16)
    yield case(aten.fill.Scalar, t(2, 3, dtype=i64), 4)
    yield case(aten.zero.default, t(2, 3, dtype=bf16))
    yield case(aten.fill.Tensor, t(2, 3), torch.tensor(2.5, dtype=torch.float64))
    yield case(aten.scalar_tensor.default, -math.inf)
    yield case(aten.scalar_tensor.default, 3, dtype=i64, id="scalar_tensor-int")
    yield case(aten.empty.memory_format, [3, 2], dtype=bf16, values=False)
    yield case(aten.empty_strided.default, [3, 2], [1, 3], values=False)
    yield case(aten.empty_permuted.default, [3, 2, 4], [0, 2, 1], values=False)
    yield case(aten.triu_indices.default, 4, 5, 1)
    yield case(aten.tril_indices.default, 5, 3, -1, dtype=i32)
    yield case(aten.arange.start_step, 0, 10, 3)
    yield case(aten.arange.start_step, 5, -4, -2, dtype=f32, id="arange-negative-step")
    yield case(aten.arange.start_step, 0.0, 1.0, 0.1, id="arange-fractional")
    yield case(aten.arange.start_step, 0, 64, 2, dtype=bf16, id="arange-bf16")
    yield case(
        prims.iota.default,
        5,
        start=3,
        step=-2,
        dtype=i64,
        device=torch.device("cpu"),
        requires_grad=False,
    )
    yield case(aten._to_copy.default, t(4, low=-3, high=3), dtype=i64, id="to_copy-f32-i64")
    yield case(aten._to_copy.default, t(4), dtype=bf16, id="to_copy-f32-bf16")
    yield case(aten._to_copy.default, special(), dtype=boolean, id="to_copy-f32-bool")
    yield case(prims.convert_element_type.default, t(4, dtype=bf16), f32)
    yield case(aten.clone.default, t(2, 3))
    yield case(aten.alias.default, t(2, 3))
    yield case(aten.lift_fresh_copy.default, t(2, 3))
    yield case(aten.copy.default, t(2, 3), t(3, dtype=i64))


def c(*shape, dtype=torch.complex64):
    """A deterministic random complex tensor (parts in ``[-2, 2)``)."""
    part = f32 if dtype == torch.complex64 else torch.float64
    return torch.complex(t(*shape, dtype=part), t(*shape, dtype=part))


def _complex_cases():
    """Complex tensors, which rules registered with ``complex=True`` get as real views."""
    z, w = c(2, 3, 4), c(2, 3, 4)
    yield case(aten.view_as_real.default, z)
    yield case(aten.view_as_complex.default, t(2, 3, 2))
    for op in (aten._conj.default, aten.conj_physical.default, aten._conj_physical.default):
        yield case(op, z)
    yield case(aten.conj_physical.default, t(3), id="conj_physical-real")
    yield case(aten.polar.default, t(3, 4, low=0), t(3, 4, low=-4, high=4))
    yield case(
        aten.polar.default, t(4, dtype=torch.float64), t(4, dtype=torch.float64), id="polar-f64"
    )
    yield case(aten.complex.default, t(3, 1), t(1, 4))
    yield case(aten.mul.Tensor, z, c(3, 1), id="mul-complex")
    yield case(aten.mul.Tensor, z, t(4), id="mul-complex-real")
    yield case(aten.mul.Tensor, t(3, 4), 1.5 - 2j, id="mul-real-complex-scalar")
    yield case(aten.mul.Tensor, c(3, dtype=torch.complex128), c(3), id="mul-complex128")
    yield case(aten.mul.Tensor, z, t(4, dtype=torch.float64), id="mul-complex64-f64")
    yield case(
        aten.mul.Tensor,
        torch.tensor([complex(math.inf, 1), complex(0, math.nan)]),
        2j,
        id="mul-complex-special",
    )
    yield case(aten.add.Tensor, z, w, alpha=2 - 1j, id="add-complex-alpha")
    yield case(aten.add.Tensor, t(3, 4), z, id="add-real-complex")
    yield case(aten.sub.Tensor, z, 0.5, id="sub-complex-scalar")
    yield case(aten.neg.default, z, id="neg-complex")
    yield case(aten.abs.default, z, id="abs-complex")
    yield case(
        aten.abs.default,
        torch.tensor([complex(3e38, 3e38), complex(math.inf, math.nan), complex(-0.0, 0.0)]),
        id="abs-complex-extremes",
    )
    yield case(aten.where.self, t(3, 4) > 0, z, t(4), id="where-complex")
    yield case(aten.sum.dim_IntList, z, [0, -1], id="sum-complex")
    yield case(aten.sum.dim_IntList, z, None, True, id="sum-complex-all")
    yield case(aten.full.default, [2, 3], 1 - 2j, id="full-complex")
    yield case(aten.full.default, [2], 3.0, dtype=torch.complex64, id="full-complex-real-value")
    yield case(aten.full_like.default, z, 2j, id="full_like-complex")
    yield case(aten.fill.Scalar, z, -1, id="fill-complex")
    yield case(aten.fill.Tensor, z, torch.tensor(1 + 1j), id="fill_tensor-complex")
    yield case(aten.zero.default, z, id="zero-complex")
    yield case(
        aten.empty.memory_format, [3], dtype=torch.complex64, values=False, id="empty-complex"
    )
    yield case(aten._to_copy.default, z, dtype=torch.complex128, id="to_copy-c64-c128")
    yield case(aten._to_copy.default, t(4), dtype=torch.complex64, id="to_copy-f32-c64")
    yield case(aten._to_copy.default, z, dtype=f32, id="to_copy-c64-f32")
    yield case(aten.clone.default, z, id="clone-complex")
    yield case(aten.copy.default, z, t(4), id="copy-complex-real")
    yield case(aten.view.default, z, [6, -1], id="view-complex")
    yield case(aten.expand.default, c(3, 1), [2, -1, 4], id="expand-complex")
    yield case(aten.permute.default, z, [2, -3, 1], id="permute-complex")
    yield case(aten.unsqueeze.default, z, -1, id="unsqueeze-complex")
    yield case(aten.squeeze.dims, c(1, 3, 1), [0, -1], id="squeeze-complex")
    yield case(aten.slice.Tensor, z, -1, 1, None, id="slice-complex")
    yield case(aten.select.int, z, -2, 1, id="select-complex")
    yield case(aten.split_with_sizes.default, z, [1, 3], -1, id="split-complex")
    yield case(aten.cat.default, [z, t(2, 3, 4)], -1, id="cat-complex-real")
    yield case(aten.div.Tensor, z, c(4), id="div-complex")
    yield case(
        aten.div.Tensor,
        t(4),
        torch.tensor([1 + 1j, 0j, 1e30 - 1e-30j]).reshape(3, 1),
        id="div-real-complex",
    )
    yield case(aten.reciprocal.default, z, id="reciprocal-complex")
    yield case(aten.exp.default, z, id="exp-complex")
    yield case(aten.log.default, z, id="log-complex")
    yield case(aten.pow.Tensor_Scalar, z, 2, id="pow-complex-square")
    yield case(aten.pow.Tensor_Scalar, z, 0.5 + 1j, id="pow-complex-scalar")
    yield case(aten.pow.Tensor_Tensor, z, w, id="pow-complex")
    yield case(aten.mean.dim, z, [-1], id="mean-complex")
    yield case(aten.eq.Tensor, z, torch.where(t(2, 3, 4) > 0, z, w), id="eq-complex")
    yield case(aten.ne.Scalar, c(4), 0j, id="ne-complex-scalar")
    yield case(aten.mm.default, c(3, 4), c(4, 2), id="mm-complex")
    yield case(aten.addmm.default, c(2), c(3, 4), c(4, 2), beta=0.5, alpha=2j, id="addmm-complex")
    yield case(aten.angle.default, z, id="angle-complex")
    yield case(aten.angle.default, torch.tensor([-1.0, 0.0, -0.0, 2.0, math.nan]), id="angle-real")
    yield case(
        aten.scalar_tensor.default, 1 - 1j, dtype=torch.complex64, id="scalar_tensor-complex"
    )
    yield case(aten.slice_scatter.default, z, c(2, 3, 2), -1, 1, 3, id="slice_scatter-complex")
    yield case(aten.select_scatter.default, z, c(2, 4), 1, -1, id="select_scatter-complex")
    yield case(aten.constant_pad_nd.default, z, [1, 0, 0, 2], 1 - 1j, id="pad-complex")
    yield case(aten.index_select.default, z, -1, torch.tensor([3, 0, 3]), id="index_select-complex")
    yield case(aten._fft_c2c.default, c(3, 8), [1], 0, True)
    yield case(aten._fft_c2c.default, c(2, 300), [1, 0], 1, False, id="fft_c2c-split-ortho-inverse")
    yield case(aten._fft_r2c.default, t(3, 10), [0, 1], 2, True)
    yield case(aten._fft_r2c.default, t(2, 260), [1], 0, False, id="fft_r2c-split-twosided")
    yield case(aten._fft_c2r.default, c(3, 6), [1], 0, 10)
    yield case(aten._fft_c2r.default, c(4, 131), [0, 1], 1, 261, id="fft_c2r-split-ortho")
    yield case(aten.unfold.default, t(3, 10), 1, 4, 3)
    yield case(aten.unfold.default, c(10, 2), 0, 4, 2, id="unfold-complex")
    yield case(aten.unfold.default, torch.tensor(2.0), 0, 1, 1, id="unfold-0d")
    yield case(aten.unfold_backward.default, t(3, 3, 4), [3, 10], 1, 4, 3)
    yield case(
        aten.unfold_backward.default, c(4, 2, 4), [10, 2], 0, 4, 2, id="unfold_backward-complex"
    )


def _shape_cases():
    x = t(2, 3, 4)
    yield case(aten.view.default, x, [4, -1])
    yield case(aten.expand.default, t(3, 1), [2, -1, 4])
    yield case(aten.permute.default, x, [2, -3, 1])
    yield case(aten.unsqueeze.default, x, -1)
    yield case(aten.squeeze.dim, t(3, 1, 2), 1)
    yield case(aten.squeeze.dims, t(1, 3, 1), [0, 1, -1])
    yield case(aten.squeeze.dim, torch.tensor(2.0), 0, id="squeeze-0d")
    yield case(aten.slice.Tensor, x, 2, 1, None)
    yield case(aten.slice.Tensor, x, -1, -3, 2**63 - 1, 2, id="slice-step-huge-end")
    yield case(aten.slice.Tensor, x, 1, 5, 9, id="slice-empty")
    yield case(aten.select.int, x, 1, -1)
    yield case(aten.split_with_sizes.default, x, [1, 0, 3], -1)
    yield case(aten.cat.default, [t(2, 3), t(1, 3, dtype=i64), t(0, 3)])
    yield case(aten.cat.default, [t(2, 2), torch.empty(0)], 1, id="cat-legacy-empty")
    yield case(aten.flip.default, x, [0, -1])
    yield case(aten.repeat.default, t(2, 3), [2, 1, 3])
    yield case(aten.constant_pad_nd.default, x, [1, 2, 0, 1], 0.5)
    yield case(aten.constant_pad_nd.default, x, [-1, 2, 1, -2], id="pad-negative")
    for offset, d1, d2 in ((0, 0, 1), (1, 1, 2), (-2, 2, 1), (5, 0, 1)):
        yield case(
            aten.diagonal.default, t(3, 4, 5), offset, d1, d2, id=f"diagonal{offset}_{d1}{d2}"
        )
    for mode in ("reflection", "replication"):
        for rank, padding in ((1, [2, 1]), (2, [1, 2, 0, 3]), (3, [1, 0, 2, 1, 1, 1])):
            op, backward = (
                getattr(aten, f"{mode}_pad{rank}d").default,
                getattr(aten, f"{mode}_pad{rank}d_backward").default,
            )
            xp = t(2, *range(4, 4 + rank))
            yield case(op, xp, padding)
            yield case(backward, t(*op(xp, padding).shape), xp, padding)
    for offset, d1, d2 in ((0, 0, 1), (1, 2, 1), (-1, 0, 2)):
        src = torch.diagonal(t(3, 4, 5), offset, d1, d2).clone()
        yield case(
            aten.diagonal_scatter.default,
            t(3, 4, 5),
            src,
            offset,
            d1,
            d2,
            id=f"diagonal_scatter{offset}_{d1}{d2}",
        )
    yield case(aten.slice_scatter.default, x, t(2, 3, 2), 2, 1, 3)
    yield case(aten.slice_scatter.default, x, t(2, 2, 4), 1, 0, None, 2, id="slice_scatter-step")
    yield case(aten.slice_scatter.default, x, t(2, 3, 4, dtype=i64), 0, id="slice_scatter-all-cast")
    yield case(aten.select_scatter.default, x, t(2, 4), 1, -1)


def _grouped_mm_cases():
    """Offsets covering every row (torch leaves the others unwritten), an empty group among
    them; sizes multiples of 8 (torch's CPU kernel wants 16-byte strides)."""
    offs = torch.tensor([5, 5, 16], dtype=i32)
    yield case(
        aten._grouped_mm.default,
        t(16, 8, dtype=bf16),
        t(3, 8, 16, dtype=bf16),
        offs,
        out_dtype=bf16,
        id="grouped_mm-2d-3d",
    )
    yield case(
        aten._grouped_mm.default,
        t(3, 8, 16, dtype=bf16),
        t(16, 16, dtype=bf16),
        offs,
        id="grouped_mm-3d-2d",
    )
    yield case(
        aten._grouped_mm.default,
        t(8, 16, dtype=bf16),
        t(16, 8, dtype=bf16),
        torch.tensor([0, 9, 16], dtype=i32),
        id="grouped_mm-2d-2d",
    )
    yield case(
        aten._grouped_mm.default,
        t(2, 8, 16, dtype=bf16),
        t(2, 16, 8, dtype=bf16),
        id="grouped_mm-3d-3d",
    )


def _linalg_cases():
    yield from _grouped_mm_cases()
    for dtype in (f32, bf16):
        yield case(aten.mm.default, t(3, 4, dtype=dtype), t(4, 5, dtype=dtype), id=f"mm-{dtype}")
        yield case(
            aten.bmm.default, t(2, 3, 4, dtype=dtype), t(2, 4, 5, dtype=dtype), id=f"bmm-{dtype}"
        )
        yield case(
            aten.addmm.default,
            t(5, dtype=dtype),
            t(3, 4, dtype=dtype),
            t(4, 5, dtype=dtype),
            id=f"addmm-{dtype}",
        )
    yield case(aten.addmm.default, t(3, 5), t(3, 4), t(4, 5), beta=0.5, alpha=2, id="addmm-scaled")
    yield case(
        aten.addmm.default,
        torch.full((5,), math.nan),
        t(3, 4),
        t(4, 5),
        beta=0,
        id="addmm-beta0-nan",
    )
    yield case(aten.mm.default, t(3, 4, dtype=i64), t(4, 2, dtype=i64), id="mm-int")
    yield case(aten.dot.default, t(6), t(6))
    yield case(aten.mv.default, t(3, 6), t(6))
    yield case(aten.addmv.default, t(3), t(3, 6), t(6), beta=2, alpha=0.5)
    x1, x2 = t(2, 4, 3), t(2, 5, 3)
    x2[0, 1] = x1[0, 2]  # a zero distance
    for p in (2.0, 1.0, 0.0, 3.0, 0.5, math.inf):
        dist = aten._cdist_forward(x1, x2, p, None)
        yield case(aten._cdist_forward.default, x1, x2, p, None, id=f"cdist-{p}")
        yield case(
            aten._cdist_backward.default, t(2, 4, 5), x1, x2, p, dist, id=f"cdist_backward-{p}"
        )
        rows = torch.cat([x1[0], x1[0, :1]])  # a repeated row
        yield case(aten._pdist_forward.default, rows, p, id=f"pdist-{p}")
        yield case(
            aten._pdist_backward.default,
            t(10),
            rows,
            p,
            aten._pdist_forward(rows, p),
            id=f"pdist_backward-{p}",
        )


def _reduction_cases():
    x = t(3, 4, 5)
    yield case(aten.sum.dim_IntList, x, [0, -1], True)
    yield case(aten.sum.dim_IntList, x, None, id="sum-all")
    yield case(aten.sum.dim_IntList, x, [], id="sum-empty-dims")
    yield case(aten.sum.dim_IntList, t(3, 4, dtype=bf16), [1], id="sum-bf16")
    yield case(aten.sum.dim_IntList, t(3, 4, dtype=i32), [1], id="sum-int-widens")
    yield case(aten.sum.dim_IntList, t(3, 4, dtype=boolean), [0], id="sum-bool")
    yield case(aten.sum.dim_IntList, x, [1], dtype=torch.float64, id="sum-dtype")
    yield case(aten.mean.dim, x, [1], True)
    yield case(aten.mean.dim, t(3, 8, dtype=bf16), [-1], id="mean-bf16")
    yield case(aten.mean.default, x)
    yield case(aten.mean.dim, t(3, 4, dtype=i64), [0], dtype=f32, id="mean-int-dtype")
    yield case(aten.prod.dim_int, x, 1)
    yield case(aten.prod.default, t(5, dtype=i32, low=1, high=4), id="prod-int")
    yield case(aten.amax.default, x, [0, 2])
    yield case(aten.amin.default, x, [], True, id="amin-all")
    yield case(aten.max.default, special())
    yield case(aten.min.default, t(4, dtype=i64))
    yield case(aten.max.dim, distinct(3, 4), 1, True)
    yield case(aten.min.dim, distinct(3, 4), 0)
    yield case(
        aten.max.dim,
        torch.tensor([[1.0, 3.0, 3.0], [math.nan, 2.0, math.nan]]),
        1,
        id="max-ties-nan",
    )
    yield case(aten.argmax.default, distinct(3, 4), 1)
    yield case(aten.argmax.default, distinct(3, 4), None, True, id="argmax-all-keepdim")
    yield case(aten.argmin.default, distinct(3, 4))
    yield case(aten.any.default, t(3, 4, dtype=boolean))
    yield case(aten.any.dim, t(3, 4, dtype=i64, low=0, high=2), 1, True)
    yield case(aten.any.dims, t(3, 4) > 1.9, [0, 1])
    yield case(aten.var.correction, x, [1], correction=0, keepdim=True)
    yield case(aten.var.correction, x, None, id="var-all")
    yield case(aten.var.correction, t(4, 6, dtype=bf16), [1], id="var-bf16")
    yield case(aten.var.dim, x, [0, 2], False)
    yield case(aten.var_mean.correction, x, [1], correction=0)
    yield case(
        aten.var_mean.correction, t(4, 6, dtype=bf16), None, keepdim=True, id="var_mean-bf16-all"
    )
    yield case(aten.cumsum.default, x, 1)
    yield case(aten.cumsum.default, t(6, dtype=i32), 0, id="cumsum-int-widens")
    yield case(aten.cumsum.default, t(4, 6, dtype=bf16), -1, id="cumsum-bf16")
    yield case(aten.cumsum.default, torch.tensor(3.0), 0, id="cumsum-0d")
    yield case(aten.cumprod.default, t(3, 4, low=0.5, high=1.5), 0)
    for ord_ in (2, 1, 0, 3.5, math.inf, -math.inf):
        yield case(
            aten.linalg_vector_norm.default,
            t(3, 4) * (t(3, 4) > 0),
            ord_,
            [1],
            id=f"vector_norm-{ord_}",
        )
    yield case(
        aten.linalg_vector_norm.default,
        t(3, 4, dtype=bf16),
        2,
        None,
        True,
        dtype=f32,
        id="vector_norm-bf16-f32",
    )


def _nn_cases():
    x = t(2, 3, 6, low=-4, high=4)
    for dtype in (f32, bf16):
        xd = x.to(dtype)
        yield case(aten._softmax.default, xd, -1, False, id=f"softmax-{dtype}")
        yield case(aten._log_softmax.default, xd, 1, False, id=f"log_softmax-{dtype}")
    yield case(
        aten._softmax.default,
        torch.tensor([[0.0, -math.inf], [-math.inf, -math.inf]]),
        1,
        False,
        id="softmax-masked",
    )
    out = torch.softmax(x, -1)
    yield case(aten._softmax_backward_data.default, t(2, 3, 6), out, -1, f32)
    yield case(aten._log_softmax_backward_data.default, t(2, 3, 6), torch.log_softmax(x, 1), 1, f32)
    yield case(
        aten._softmax_backward_data.default,
        t(3, 6, dtype=bf16),
        out[0].to(bf16),
        -1,
        bf16,
        id="softmax_backward-bf16",
    )
    yield case(aten.relu.default, special())
    yield case(aten.relu.default, t(5, dtype=i64, low=-5, high=5), id="relu-int")
    yield case(aten.hardtanh.default, x, -0.5, 2.0)
    yield case(aten.leaky_relu.default, x, 0.2)
    yield case(aten.elu.default, x, 1.5, 2.0, 0.5)
    for approximate in ("none", "tanh"):
        for dtype in (f32, bf16):
            yield case(
                aten.gelu.default,
                x.to(dtype),
                approximate=approximate,
                id=f"gelu-{approximate}-{dtype}",
            )
    yield case(aten.native_layer_norm.default, x, [6], t(6), t(6), 1e-5)
    yield case(
        aten.native_layer_norm.default, x, [3, 6], None, None, 1e-5, id="layer_norm-2d-plain"
    )
    yield case(
        aten.native_layer_norm.default,
        x.to(bf16),
        [6],
        t(6, dtype=bf16),
        None,
        1e-5,
        id="layer_norm-bf16",
    )
    yield case(aten.native_group_norm.default, t(2, 4, 3, 2), t(4), t(4), 2, 4, 6, 2, 1e-5)
    for dtype, weight, mask in (
        (f32, t(3, 6), [True, True, True]),
        (bf16, None, [True, False, False]),
    ):
        xl = t(2, 5, 3, 6, dtype=dtype)
        w = None if weight is None else weight.to(dtype)
        _, mean, rstd = aten.native_layer_norm(xl, [3, 6], w, None, 1e-5)
        yield case(
            aten.native_layer_norm_backward.default,
            t(2, 5, 3, 6, dtype=dtype),
            xl,
            [3, 6],
            mean,
            rstd,
            w,
            w,
            mask,
            id=f"layer_norm_backward-{dtype}",
        )
    xg = t(2, 4, 3, 2)
    _, mean, rstd = aten.native_group_norm(xg, t(4), t(4), 2, 4, 6, 2, 1e-5)
    yield case(
        aten.native_group_norm_backward.default,
        t(2, 4, 3, 2),
        xg,
        mean,
        rstd,
        t(4),
        2,
        4,
        6,
        2,
        [True, True, True],
    )
    yield case(
        aten.native_group_norm_backward.default,
        t(2, 4, 3, 2),
        xg,
        mean,
        rstd,
        None,
        2,
        4,
        6,
        2,
        [True, False, False],
        id="group_norm_backward-no-weight",
    )
    bn = (t(4, 3, 5), t(3), t(3), t(3), t(3, low=0.5, high=2))
    yield case(aten._native_batch_norm_legit_no_training.default, *bn, 0.1, 1e-5)
    yield case(aten._native_batch_norm_legit.default, *bn, False, 0.1, 1e-5)
    yield case(aten._native_batch_norm_legit.no_stats, bn[0], bn[1], bn[2], True, 0.1, 1e-5)
    yield case(
        aten._native_batch_norm_legit_functional.default, *bn[:3], bn[3], bn[4], True, 0.1, 1e-5
    )
    yield case(aten.native_dropout.default, x, 0.5, False)
    yield case(aten.native_dropout.default, x, 0.0, True, id="native_dropout-p0")
    yield case(aten.native_dropout.default, x, 1.0, True, id="native_dropout-p1")
    q, k, v = t(2, 2, 5, 4), t(2, 2, 7, 4), t(2, 2, 7, 4)
    sdpa = aten._scaled_dot_product_flash_attention_for_cpu.default
    yield case(sdpa, q, k, v)
    yield case(sdpa, q, k, v, is_causal=True, scale=0.3, id="sdpa-causal")
    yield case(sdpa, q, k, v, attn_mask=t(2, 1, 5, 7), id="sdpa-float-mask")
    masked_row = torch.zeros(5, 7).index_fill_(0, torch.tensor([2]), -math.inf)
    yield case(sdpa, q, k, v, attn_mask=masked_row, id="sdpa-masked-row")
    yield case(sdpa, q.to(bf16), k.to(bf16), v.to(bf16), is_causal=True, id="sdpa-bf16")
    kv = t(2, 1, 7, 4), t(2, 1, 7, 4)
    yield case(sdpa, q, *kv, is_causal=True, id="sdpa-grouped-query")
    sdpa_bw = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    out, lse = sdpa(q, *kv, is_causal=True)
    yield case(
        sdpa_bw, t(2, 2, 5, 4), q, *kv, out, lse, 0.0, True, id="sdpa_backward-grouped-query"
    )
    for causal, mask in ((False, None), (True, None), (False, t(5, 7)), (False, masked_row)):
        out, lse = sdpa(q, k, v, is_causal=causal, attn_mask=mask)
        yield case(
            sdpa_bw,
            t(2, 2, 5, 4),
            q,
            k,
            v,
            out,
            lse,
            0.0,
            causal,
            attn_mask=mask,
            id=f"sdpa_backward-causal{causal}-mask{mask is not None}",
        )


def _conv_cases():
    conv, conv_bw = aten.convolution.default, aten.convolution_backward.default
    geometries = {  # x, weight, stride, padding, dilation, transposed, output_padding, groups
        "2d-grouped-strided": (
            t(2, 4, 7, 8),
            t(6, 2, 3, 2),
            [2, 1],
            [1, 0],
            [1, 2],
            False,
            [0, 0],
            2,
        ),
        "1d-dilated": (t(2, 3, 9), t(5, 3, 3), [1], [2], [2], False, [0], 1),
        "3d": (
            t(1, 2, 4, 5, 3),
            t(3, 2, 2, 3, 1),
            [1, 2, 1],
            [0, 1, 0],
            [1, 1, 1],
            False,
            [0, 0, 0],
            1,
        ),
        "2d-transposed": (t(2, 4, 5, 4), t(4, 3, 3, 3), [2, 2], [1, 1], [1, 1], True, [1, 0], 2),
        "2d-depthwise-multiplier": (
            t(2, 3, 9, 8),
            t(6, 1, 3, 3),
            [2, 1],
            [1, 2],
            [1, 2],
            False,
            [0, 0],
            3,
        ),
        "1d-transposed-dilated": (t(2, 4, 6), t(4, 2, 3), [3], [2], [2], True, [1], 1),
    }
    for name, (x, w, *geometry) in geometries.items():
        bias = t(w.shape[1] * geometry[-1] if geometry[3] else w.shape[0])
        yield case(conv, x, w, bias, *geometry, id=f"convolution-{name}")
        grad = t(*conv(x, w, bias, *geometry).shape)
        yield case(
            conv_bw,
            grad,
            x,
            w,
            [bias.numel()],
            *geometry,
            [True, True, True],
            id=f"convolution_backward-{name}",
        )
    x, w = t(2, 3, 6, 6, dtype=bf16), t(4, 3, 3, 3, dtype=bf16)
    yield case(
        conv, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, id="convolution-bf16-nobias"
    )
    xi, wi = t(1, 3, 9, 9, dtype=i64, low=-5, high=5), t(3, 1, 3, 3, dtype=i64, low=-3, high=3)
    integer_geometries = {  # stride, padding, dilation, transposed, output_padding, groups
        "depthwise": ([1, 1], [1, 1], [1, 1], False, [0, 0], 3),
        "transposed": ([2, 2], [0, 0], [1, 1], True, [1, 1], 3),
    }
    for name, geometry in integer_geometries.items():
        yield case(conv, xi, wi, None, *geometry, id=f"convolution-int64-{name}")
    yield case(
        conv_bw,
        t(2, 4, 6, 6, dtype=bf16),
        x,
        w,
        None,
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        1,
        [True, False, False],
        id="convolution_backward-bf16-input-only",
    )


def _pooling_cases():
    x = t(2, 3, 7, 6)
    for ceil_mode, include_pad, override in (
        (False, True, None),
        (True, False, None),
        (True, True, 5),
    ):
        geometry = ([3, 2], [2, 2], [1, 1], ceil_mode, include_pad, override)
        name = f"ceil{ceil_mode}-pad{include_pad}-div{override}"
        yield case(aten.avg_pool2d.default, x, *geometry, id=f"avg_pool2d-{name}")
        grad = t(*torch.ops.aten.avg_pool2d(x, *geometry).shape)
        yield case(
            aten.avg_pool2d_backward.default, grad, x, *geometry, id=f"avg_pool2d_backward-{name}"
        )
    yield case(
        aten.avg_pool2d.default, t(3, 5, 5, dtype=bf16), [2, 2], id="avg_pool2d-unbatched-bf16"
    )
    x3 = t(1, 2, 5, 4, 6)
    yield case(aten.avg_pool3d.default, x3, [2, 2, 3], [1, 2, 2], [1, 0, 1])
    yield case(
        aten.avg_pool3d_backward.default,
        t(1, 2, 6, 2, 3),
        x3,
        [2, 2, 3],
        [1, 2, 2],
        [1, 0, 1],
        False,
        True,
        None,
    )
    for ceil_mode in (False, True):
        geometry = ([3, 3], [2, 2], [1, 1], [1, 1], ceil_mode)
        xd = distinct(2, 3, 7, 6)
        values, indices = aten.max_pool2d_with_indices(xd, *geometry)
        yield case(
            aten.max_pool2d_with_indices.default, xd, *geometry, id=f"max_pool2d-ceil{ceil_mode}"
        )
        yield case(
            aten.max_pool2d_with_indices_backward.default,
            t(*values.shape),
            xd,
            *geometry,
            indices,
            id=f"max_pool2d_backward-ceil{ceil_mode}",
        )
    x3 = distinct(1, 2, 5, 4, 6)
    geometry = ([2, 2, 3], [1, 2, 2], [1, 0, 1], [1, 1, 2], False)
    values, indices = aten.max_pool3d_with_indices(x3, *geometry)
    yield case(aten.max_pool3d_with_indices.default, x3, *geometry)
    yield case(
        aten.max_pool3d_with_indices_backward.default, t(*values.shape), x3, *geometry, indices
    )
    yield case(aten.col2im.default, t(2, 3 * 6, 12), [5, 4], [2, 3], [1, 1], [1, 0], [1, 1])
    yield case(
        aten.col2im.default,
        t(3 * 4, 8),
        [4, 6],
        [2, 2],
        [1, 2],
        [0, 0],
        [2, 1],
        id="col2im-unbatched-dilated",
    )
    for size, scales in (([7, 10], None), (None, [2.0, 1.5]), ([3, 2], None)):
        yield case(
            aten.upsample_nearest2d.vec,
            t(2, 3, 4, 5),
            size,
            scales,
            id=f"upsample_nearest2d-{size}-{scales}",
        )
        for align in (False, True):
            yield case(
                aten.upsample_bilinear2d.vec,
                t(2, 3, 4, 5),
                size,
                align,
                scales,
                id=f"upsample_bilinear2d-{size}-{scales}-{align}",
            )
    yield case(aten.upsample_nearest2d_backward.default, t(2, 3, 7, 10), [7, 10], [2, 3, 4, 5])
    yield case(
        aten.upsample_bilinear2d_backward.default,
        t(2, 3, 8, 7),
        [8, 7],
        [2, 3, 4, 5],
        False,
        2.0,
        1.5,
    )
    yield case(
        aten.upsample_bilinear2d.vec,
        t(1, 2, 4, 4, dtype=bf16),
        [6, 6],
        True,
        None,
        id="upsample_bilinear2d-bf16",
    )
    yield case(aten._adaptive_avg_pool2d.default, t(2, 3, 7, 5), [3, 4])
    yield case(aten.adaptive_avg_pool1d.default, t(2, 3, 7), [3])
    yield case(aten._adaptive_avg_pool3d.default, t(2, 5, 4, 6), [2, 3, 4])
    yield case(aten._adaptive_avg_pool3d_backward.default, t(2, 2, 3, 4), t(2, 5, 4, 6))
    yield case(aten.avg_pool1d.default, t(2, 3, 9), [3], [2], [1], True, False)
    xd = distinct(2, 3, 7, 5)
    values, indices = aten.adaptive_max_pool2d(xd, [3, 4])
    yield case(aten.adaptive_max_pool2d.default, xd, [3, 4])
    yield case(aten.adaptive_max_pool2d_backward.default, t(*values.shape), xd, indices)
    yield case(aten._adaptive_avg_pool2d_backward.default, t(2, 3, 3, 4), t(2, 3, 7, 5))


def _indexing_cases():
    x = t(4, 5, 6)
    idx = torch.tensor([[3, 0], [1, 1]])
    yield case(aten.index_select.default, x, 1, torch.tensor([4, 0, 0]))
    yield case(aten.index_select.default, x, -1, torch.tensor(2), id="index_select-0d-index")
    yield case(aten.embedding.default, t(10, 3), torch.tensor([[1, 9], [0, 1]]))
    tokens = torch.tensor([[1, 9, 1], [0, 1, 3]])
    yield case(aten.embedding_dense_backward.default, t(2, 3, 4), tokens, 10, -1, False)
    yield case(
        aten.embedding_dense_backward.default,
        t(2, 3, 4),
        tokens,
        10,
        1,
        True,
        id="embedding_backward-padding-freq",
    )
    yield case(
        aten.embedding_dense_backward.default,
        t(2, 3, 4, dtype=bf16),
        tokens,
        10,
        0,
        False,
        id="embedding_backward-bf16",
    )
    yield case(aten.index.Tensor, x, [idx])
    yield case(aten.index.Tensor, x, [None, torch.tensor([-1, 2, 0])], id="index-negative")
    yield case(aten.index.Tensor, x, [None, idx, torch.tensor([5, -6])], id="index-adjacent")
    yield case(aten.index.Tensor, x, [idx, None, torch.tensor([0, 5])], id="index-separated")
    for accumulate in (False, True):
        yield case(
            aten.index_put.default,
            x,
            [None, torch.tensor([4, 0, 2])],
            t(3, 6),
            accumulate,
            id=f"index_put-{accumulate}",
        )
        yield case(
            aten.index_put.default,
            x,
            [torch.tensor([1, -1]), None, torch.tensor([0, 5])],
            t(5),
            accumulate,
            id=f"index_put-separated-{accumulate}",
        )
    yield case(
        aten.index_put.default,
        x,
        [torch.tensor([0, 2, 0])],
        torch.tensor(1.0),
        True,
        id="index_put-duplicates-accumulate",
    )
    mask = torch.tensor([[True, False, True, False, False], [False, True, True, False, True]])
    yield case(aten.index_put.default, t(2, 5, 3), [mask], t(5, 3), id="index_put-mask-rows")
    yield case(
        aten.index_put.default,
        t(2, 5, 3),
        [mask],
        torch.tensor(-1.0),
        True,
        id="index_put-mask-scalar-accumulate",
    )
    yield case(aten.index_put.default, x, [None, None, t(6) > 0], t(1), id="index_put-mask-inner")
    yield case(
        aten.index_select.default,
        torch.tensor(3.0),
        0,
        torch.tensor([0]),
        id="index_select-0d-input",
    )
    gather_index = torch.tensor([[0, 3, 3], [2, 1, 0]])
    yield case(aten.gather.default, t(3, 4), 1, gather_index)
    yield case(
        aten.gather.default, t(3, 4), 0, torch.tensor([[2, 0], [1, 1]]), id="gather-small-index"
    )
    yield case(aten.scatter_add.default, t(3, 5), 1, gather_index, t(2, 4))
    yield case(
        aten.scatter_add.default,
        t(4, 3),
        0,
        torch.tensor([[0, 1, 0], [0, 3, 0]]),
        t(2, 3),
        id="scatter_add-dim0",
    )
    yield case(aten.scatter.src, t(3, 5), 1, torch.tensor([[0, 3, 4], [2, 1, 0]]), t(2, 4))
    yield case(aten.scatter.value, t(3, 5, dtype=i64), 0, torch.tensor([[2, 0, 1]]), 7)
    for reduce in ("sum", "mean"):
        for include_self in (True, False):
            yield case(
                aten.scatter_reduce.two,
                t(3, 5),
                1,
                gather_index,
                t(2, 3),
                reduce,
                include_self=include_self,
                id=f"scatter_reduce-{reduce}-{include_self}",
            )
    yield case(aten.masked_scatter.default, t(3, 4), t(4, dtype=boolean), t(20))
    yield case(aten.put.default, t(3, 4), torch.tensor([[0, -1], [5, 7]]), t(2, 2))
    yield case(aten.put.default, t(3, 4), torch.tensor([0, 11, 0]), t(3), True, id="put-accumulate")
    boundaries, values = (
        torch.tensor([0.0, 1, 1, 2]),
        torch.tensor([[math.nan, -1, 1], [1.5, 3, math.inf]]),
    )
    yield case(aten.bucketize.Tensor, values, boundaries)
    yield case(
        aten.bucketize.Tensor,
        values,
        boundaries,
        right=True,
        out_int32=True,
        id="bucketize-right-int32",
    )
    yield case(aten.bucketize.Scalar, 1, boundaries)
    yield case(
        aten.searchsorted.Tensor,
        torch.tensor([[0.0, 1], [2, 3]]),
        torch.tensor([[0.5, 2], [2.5, 9]]),
        side="right",
    )
    yield case(aten.searchsorted.Scalar, boundaries, 1.0)


def _sorting_cases():
    x = distinct(3, 6)
    yield case(aten.sort.default, x)
    yield case(aten.sort.default, x, 0, True, id="sort-descending")
    yield case(
        aten.sort.stable,
        torch.tensor([2, 1, 2, 1, 0]),
        stable=True,
        descending=True,
        id="sort-stable-ties",
    )
    yield case(aten.sort.default, t(7, dtype=i64, low=-9, high=9), id="sort-int")
    yield case(aten.topk.default, x, 3)
    yield case(aten.topk.default, x, 2, 0, False, id="topk-smallest")


def _random_cases():
    """Shapes and dtypes only: values are tested statistically in ``test_random.py``."""
    for dtype in (f32, bf16, torch.float64):
        yield case(aten.rand.default, [3, 4], dtype=dtype, values=False, id=f"rand-{dtype}")
        yield case(aten.randn.default, [5], dtype=dtype, values=False, id=f"randn-{dtype}")
    yield case(aten.rand.generator, [3], generator=None, values=False)
    yield case(aten.randn.generator, [3], generator=None, values=False)
    yield case(aten.rand_like.default, t(2, 3), values=False)
    yield case(aten.randn_like.default, t(2, 3, dtype=bf16), values=False)
    yield case(aten.uniform.default, t(4, 2), -1.0, 3.0, values=False)
    yield case(aten.normal.float_float, 1.0, 2.0, [3, 2], values=False)
    yield case(aten.normal.Tensor_float, t(3), 2.0, values=False)
    yield case(aten.normal.float_Tensor, 1.0, t(3, low=0.5), values=False)
    yield case(aten.normal.Tensor_Tensor, t(3), t(3, low=0.5), values=False)
    yield case(aten.normal_functional.default, t(2, 2), 1.0, 0.5, values=False)
    yield case(aten.bernoulli.default, t(6, low=0, high=1), values=False)
    yield case(aten.bernoulli.p, t(6, dtype=torch.float64), 0.3, values=False)
    yield case(aten.bernoulli.Tensor, t(6), t(6, low=0, high=1), values=False)
    yield case(
        aten.native_dropout.default, t(4, 5), 0.25, True, values=False, id="native_dropout-train"
    )
    yield case(aten.randint.default, 7, [5], values=False)
    yield case(aten.randint.generator, 7, [5], generator=None, values=False)
    yield case(aten.randint.low, -3, 9, [2, 3], dtype=i32, values=False)
    yield case(aten.randint.low_generator, -3, 9, [2, 3], generator=None, values=False)
    yield case(aten.randint_like.default, t(2, 2), 10, values=False)
    yield case(aten.randint_like.low_dtype, t(2, 2), 2, 10, dtype=i64, values=False)
    yield case(aten.randperm.default, 9, values=False)
    yield case(aten.randperm.generator, 9, generator=None, dtype=i32, values=False)


def _embedding_bag_cases():
    weight, indices = t(10, 3), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0])
    offsets = torch.tensor([0, 3, 3, 6])
    for op in (aten._embedding_bag.default, aten._embedding_bag_forward_only.default):
        name = op._schema.name[6:]
        for mode in (0, 1, 2):
            for padding_idx in (-1, 2):
                yield case(
                    op,
                    weight,
                    indices,
                    offsets,
                    False,
                    mode,
                    False,
                    None,
                    False,
                    padding_idx,
                    id=f"{name}-mode{mode}-padding{padding_idx}",
                )
    op = aten._embedding_bag.default
    yield case(
        op, weight, indices, offsets, False, 0, False, t(10), id="embedding_bag-per-sample-weights"
    )
    yield case(
        op,
        weight,
        indices,
        offsets,
        False,
        0,
        False,
        t(10),
        False,
        4,
        id="embedding_bag-per-sample-weights-padding",
    )
    yield case(
        op,
        weight,
        indices,
        torch.tensor([0, 3, 3, 6, 10]),
        False,
        1,
        False,
        None,
        True,
        id="embedding_bag-include-last-offset",
    )
    yield case(op, t(10, 3, dtype=bf16), indices, offsets, False, 1, id="embedding_bag-mean-bf16")
    yield case(op, t(10, 3, dtype=bf16), indices, offsets, False, 2, id="embedding_bag-max-bf16")
    yield case(
        op,
        t(6, 2),
        torch.tensor([0, 1, 1, 0], dtype=i32),
        torch.tensor([0, 2], dtype=i32),
        False,
        2,
        id="embedding_bag-max-ties-int32",
    )
    for mode, padding_idx, freq, weights in (
        (0, -1, False, None),
        (0, 4, False, t(10)),
        (1, 2, False, None),
        (1, -1, False, None),
        (2, -1, True, None),
        (2, 2, False, None),
    ):
        _, offset2bag, bag_size, max_indices = op(
            weight, indices, offsets, freq, mode, False, weights, False, padding_idx
        )
        grad = t(4, 3)
        yield case(
            aten._embedding_bag_backward.default,
            grad,
            indices,
            offsets,
            offset2bag,
            bag_size,
            max_indices,
            10,
            freq,
            mode,
            False,
            weights,
            padding_idx,
            id=f"embedding_bag_backward-mode{mode}-padding{padding_idx}-freq{freq}",
        )
        if offset2bag.numel():
            yield case(
                aten._embedding_bag_dense_backward.default,
                grad,
                indices,
                offset2bag,
                bag_size,
                max_indices,
                10,
                freq,
                mode,
                weights,
                padding_idx,
                id=f"embedding_bag_dense_backward-mode{mode}-padding{padding_idx}",
            )
    _, offset2bag, bag_size, max_indices = op(t(10, 3, dtype=bf16), indices, offsets, False, 1)
    yield case(
        aten._embedding_bag_backward.default,
        t(4, 3, dtype=bf16),
        indices,
        offsets,
        offset2bag,
        bag_size,
        max_indices,
        10,
        False,
        1,
        False,
        None,
        id="embedding_bag_backward-bf16",
    )
    for padding_idx in (-1, 2):
        offset2bag = op(weight, indices, offsets, False, 0, False, t(10), False, padding_idx)[1]
        yield case(
            aten._embedding_bag_per_sample_weights_backward.default,
            t(4, 3),
            weight,
            indices,
            offsets,
            offset2bag,
            0,
            padding_idx,
            id=f"embedding_bag_per_sample_weights_backward-padding{padding_idx}",
        )


def _grid_sample_cases():
    x, grid = t(2, 3, 4, 5), t(2, 3, 6, 2, low=-1.3, high=1.3)
    for mode in (0, 1, 2):
        for padding in (0, 1, 2):
            for align in (False, True):
                name = f"mode{mode}-padding{padding}-align{align}"
                yield case(
                    aten.grid_sampler_2d.default,
                    x,
                    grid,
                    mode,
                    padding,
                    align,
                    id=f"grid_sampler_2d-{name}",
                )
                yield case(
                    aten.grid_sampler_2d_backward.default,
                    t(2, 3, 3, 6),
                    x,
                    grid,
                    mode,
                    padding,
                    align,
                    [True, True],
                    tol=(1e-4, 1e-4),
                    id=f"grid_sampler_2d_backward-{name}",
                )
    yield case(
        aten.grid_sampler_2d.default,
        t(1, 2, 3, 3, dtype=bf16),
        t(1, 2, 2, 2, dtype=bf16, low=-1, high=1),
        0,
        0,
        False,
        id="grid_sampler_2d-bf16",
    )
    yield case(
        aten.grid_sampler_2d_backward.default,
        t(1, 2, 2, 2, dtype=bf16),
        t(1, 2, 3, 3, dtype=bf16),
        t(1, 2, 2, 2, dtype=bf16, low=-1, high=1),
        0,
        0,
        False,
        [True, True],
        tol=(3e-2, 3e-2),
        id="grid_sampler_2d_backward-bf16",
    )
    yield case(
        aten.grid_sampler_2d_backward.default,
        t(2, 3, 3, 6),
        x,
        grid,
        0,
        0,
        False,
        [False, True],
        id="grid_sampler_2d_backward-grid-only",
    )
    yield case(
        aten.grid_sampler_2d.default,
        t(1, 1, 1, 4),
        t(1, 2, 3, 2, low=-2, high=2),
        0,
        2,
        True,
        id="grid_sampler_2d-reflect-single-row",
    )


def _strided_cases():
    x = t(4, 6)
    yield case(aten.as_strided.default, x, [3, 3], [6, 1], 2, id="as_strided-rows")
    yield case(aten.as_strided.default, x, [2, 3, 2], [1, 4, 7], id="as_strided-overlapping")
    yield case(aten.as_strided.default, x, [5, 2], [0, 3], 11, id="as_strided-broadcast")
    yield case(aten.as_strided.default, t(3, 2, dtype=bf16), [6], [1], id="as_strided-flatten-bf16")
    yield case(aten.as_strided.default, x, [0, 4], [1, 1], id="as_strided-empty")
    yield case(
        aten.as_strided.default,
        torch.arange(12.0)[2:],
        [2, 2],
        [3, 1],
        4,
        id="as_strided-offset-view",
    )
    yield case(
        aten.as_strided_scatter.default, x, t(3, 4), [3, 4], [6, 1], 1, id="as_strided_scatter-rows"
    )
    yield case(
        aten.as_strided_scatter.default,
        x,
        t(2, 6),
        [2, 6],
        [6, 1],
        6,
        id="as_strided_scatter-contiguous",
    )
    yield case(
        aten.as_strided_scatter.default,
        t(3, 4, dtype=bf16),
        t(4, 2, dtype=bf16),
        [4, 2],
        [1, 5],
        id="as_strided_scatter-transposed-bf16",
    )


def _special_function_cases():
    domains = {"erfc": (-4, 8), "erfinv": (-0.999, 0.999), "lgamma": (-6, 12), "digamma": (-6, 12)}
    for name, (low, high) in domains.items():
        op = getattr(aten, name).default
        for dtype in (f32, bf16):
            yield case(op, t(4, 6, dtype=dtype, low=low, high=high), id=f"{name}-{dtype}")
        yield case(
            op,
            t(4, 6, dtype=torch.float64, low=low, high=high),
            tol=(1e-12, 1e-12),
            id=f"{name}-f64",
        )
    poles = torch.tensor(
        [0.0, -0.0, -1.0, -2.0, 1.0, 2.0, math.inf, -math.inf, math.nan, -2.5, 1e-30, 1e30]
    )
    for n in (0, 1, 2, 3, 5):
        for dtype in (f32, bf16):
            yield case(
                aten.polygamma.default,
                n,
                t(4, 6, dtype=dtype, low=-6, high=12),
                tol=(2e-5, 1e-5) if dtype == f32 else None,
                id=f"polygamma-{n}-{dtype}",
            )
        yield case(
            aten.polygamma.default,
            n,
            t(3, 4, dtype=torch.float64, low=-6, high=12),
            tol=(1e-10, 1e-12),
            id=f"polygamma-{n}-f64",
        )
    yield case(aten.polygamma.default, 3, poles, id="polygamma-3-poles")
    yield case(aten.lgamma.default, poles, id="lgamma-poles")
    yield case(aten.digamma.default, poles, id="digamma-poles")
    yield case(
        aten.erfc.default,
        torch.tensor([-math.inf, 0.0, 5.0, 9.0, math.inf, math.nan]),
        tol=(1e-6, 0),
        id="erfc-tail",
    )
    yield case(
        aten.erfinv.default,
        torch.tensor([-1.0, 1.0, 0.0, 1.5, math.nan, 1 - 2**-20]),
        id="erfinv-edges",
    )
    yield case(aten.lgamma.default, t(5, dtype=i64, low=-3, high=6), id="lgamma-int")
    yield case(aten.signbit.default, special(), id="signbit-special")
    yield case(
        aten.signbit.default,
        torch.tensor([-0.0, math.nan, -math.nan, 1.0], dtype=bf16),
        id="signbit-bf16",
    )
    yield case(aten.signbit.default, t(6, dtype=i64, low=-3, high=3), id="signbit-int")
    yield case(aten.copysign.Tensor, special(), special().flip(0).neg(), id="copysign-special")
    yield case(aten.copysign.Tensor, t(4, 5, dtype=bf16), t(5))
    yield case(
        aten.copysign.Scalar, t(6, dtype=i64, low=-3, high=3), -0.0, id="copysign-int-negative-zero"
    )
    a, b = t(3, 4), t(4, low=0.5, high=2)
    yield case(aten.atan2.out, a, b, out=torch.empty(3, 4))
    yield case(
        aten.atan2.out,
        a,
        b,
        out=torch.empty(0, dtype=torch.float64),
        tol=(1e-6, 1e-6),
        id="atan2-out-resized-f64",
    )
    yield case(
        aten.atan2.out,
        t(3, dtype=bf16),
        t(3, dtype=bf16),
        out=torch.empty(3, dtype=bf16),
        id="atan2-out-bf16",
    )


def _bessel_and_polynomial_cases():
    f64 = torch.float64
    edges = [0.0, -0.0, math.inf, -math.inf, math.nan]
    domains = {
        "i0": (aten.i0.default, (-12, 12)),
        "special_i0e": (aten.special_i0e.default, (-40, 40)),
        "special_i1": (aten.special_i1.default, (-12, 12)),
        "special_i1e": (aten.special_i1e.default, (-40, 40)),
        "special_modified_bessel_i0": (aten.special_modified_bessel_i0.default, (-12, 12)),
        "special_modified_bessel_i1": (aten.special_modified_bessel_i1.default, (-12, 12)),
        "special_modified_bessel_k0": (aten.special_modified_bessel_k0.default, (0.05, 20)),
        "special_modified_bessel_k1": (aten.special_modified_bessel_k1.default, (0.05, 20)),
        "special_scaled_modified_bessel_k0": (
            aten.special_scaled_modified_bessel_k0.default,
            (0.05, 40),
        ),
        "special_scaled_modified_bessel_k1": (
            aten.special_scaled_modified_bessel_k1.default,
            (0.05, 40),
        ),
        "special_bessel_j0": (aten.special_bessel_j0.default, (-25, 25)),
        "special_bessel_j1": (aten.special_bessel_j1.default, (-25, 25)),
        "special_bessel_y0": (aten.special_bessel_y0.default, (0.05, 25)),
        "special_bessel_y1": (aten.special_bessel_y1.default, (0.05, 25)),
        "special_spherical_bessel_j0": (aten.special_spherical_bessel_j0.default, (-25, 25)),
        "special_airy_ai": (aten.special_airy_ai.default, (-12, 12)),
        "special_erfcx": (aten.special_erfcx.default, (-4, 40)),
        "special_ndtri": (aten.special_ndtri.default, (0.001, 0.999)),
    }
    # values where the interval formulas meet, and the ops' edges
    extra = {
        "special_modified_bessel_k0": [2.0, -1.0, 1e-30, 700.0],
        "special_modified_bessel_k1": [2.0, -1.0, 1e-30, 700.0],
        "special_scaled_modified_bessel_k0": [2.0, -1.0, 1e-30, 700.0],
        "special_scaled_modified_bessel_k1": [2.0, -1.0, 1e-30, 700.0],
        "special_bessel_y0": [5.0, -1.0, 1e-30, 1e4],
        "special_bessel_y1": [5.0, -1.0, 1e-30, 1e4],
        "special_bessel_j0": [5.0, -5.0, 1e-30, 1e4],
        "special_bessel_j1": [5.0, -5.0, 1e-30, 1e4],
        "special_spherical_bessel_j0": [1e-30, 0.5, -3.0, 1e4],
        "special_airy_ai": [2.09, -2.09, 103.0, 110.0],
        "special_erfcx": [3.0, -26.0, -30.0, 1e30],
        "special_ndtri": [1.0, 0.5, -0.5, 1.5, 1e-30, 0.135],
        "i0": [8.0, -8.0, 100.0],
        "special_i0e": [8.0, -8.0, 1e30],
        "special_i1": [8.0, -8.0, 100.0],
        "special_i1e": [8.0, -8.0, 1e30],
        "special_modified_bessel_i0": [8.0, -8.0],
        "special_modified_bessel_i1": [8.0, -8.0],
    }
    for name, (op, (low, high)) in domains.items():
        yield case(op, t(4, 6, low=low, high=high), id=f"{name}-f32")
        yield case(op, t(4, 6, dtype=f64, low=low, high=high), tol=(1e-12, 1e-14), id=f"{name}-f64")
        yield case(op, torch.tensor(edges + extra[name]), id=f"{name}-edges")
    for op in (
        aten.i0.default,
        aten.special_i0e.default,
        aten.special_i1.default,
        aten.special_i1e.default,
    ):
        yield case(op, t(4, 6, dtype=bf16, low=-6, high=6), id=f"{op._schema.name[6:]}-bf16")
    yield case(aten.i0.default, t(6, dtype=i64, low=-5, high=5), id="i0-int")

    # orthogonal polynomials: degrees with negatives, fractions (truncated), NaN and ones past
    # torch's switch to the trigonometric forms
    degrees = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.7, 7.0, 9.0, 12.0, -1.0, math.nan, 30.0, 5.0])
    inside = torch.tensor([-1.0, 1.0, 0.0, -0.3, 0.25, 0.9, -0.95, 0.5, 0.7, -0.6, 0.1, -0.8])
    chebyshev = ("chebyshev", "shifted_chebyshev")
    for prefix in chebyshev:
        for kind in "tuvw":
            name = f"{prefix}_polynomial_{kind}"
            packet = getattr(aten, f"special_{name}")
            x = (inside + 1) / 2 if prefix == "shifted_chebyshev" else inside
            yield case(packet.default, x, degrees, id=f"{name}-default")
            # |x| > 1, degrees past the unrolled bound (64) too: the hyperbolic forms
            outside = torch.tensor([1.5, -1.5, 1.05, -1.02, 1.1, -1.1])
            if prefix == "shifted_chebyshev":
                outside = (outside + 1) / 2
            yield case(
                packet.default,
                outside,
                torch.tensor([3.0, 4.0, 70.0, 71.0, 100.0, 9.0]),
                id=f"{name}-outside",
            )
            yield case(packet.x_scalar, 0.3, degrees, id=f"{name}-x_scalar")
            yield case(packet.n_scalar, x, 5, id=f"{name}-n_scalar")
            yield case(
                packet.default,
                x.to(f64),
                degrees.to(f64),
                tol=(1e-12, 1e-12),
                id=f"{name}-f64",
            )
    others = {
        "hermite_polynomial_h": t(12, low=-3, high=3),
        "hermite_polynomial_he": t(12, low=-3, high=3),
        "laguerre_polynomial_l": torch.tensor(
            [0.0, 0.5, 1.0, 2.0, 3.5, 5.0, 10.0, -1.0, 0.2, 7.0, 0.0, 4.0]
        ),
        "legendre_polynomial_p": inside,
    }
    for name, x in others.items():
        packet = getattr(aten, f"special_{name}")
        yield case(packet.default, x, degrees, id=f"{name}-default")
        yield case(packet.x_scalar, 0.3, degrees, id=f"{name}-x_scalar")
        yield case(packet.n_scalar, x, 5, id=f"{name}-n_scalar")
        yield case(packet.default, x.to(f64), degrees.to(f64), tol=(1e-12, 1e-12), id=f"{name}-f64")

    # Hurwitz zeta: poles at x = 1 and q = 0, -1, ...; negative q only for integer x
    x = torch.tensor([1.5, 2.0, 3.0, 4.5, 1.0, 0.5, 2.0, 3.0, 2.5, 6.0, math.inf, math.nan])
    q = torch.tensor([0.5, 1.0, 2.5, 10.0, 2.0, 1.0, -1.5, 0.0, -0.5, 1e-3, 2.0, 1.0])
    yield case(aten.special_zeta.default, x, q, id="special_zeta-edges")
    yield case(
        aten.special_zeta.default,
        t(4, 6, low=1.1, high=8),
        t(4, 6, low=0.1, high=20),
        id="special_zeta-f32",
    )
    yield case(
        aten.special_zeta.default,
        t(4, 6, dtype=f64, low=1.1, high=8),
        t(4, 6, dtype=f64, low=0.1, high=20),
        tol=(1e-12, 1e-14),
        id="special_zeta-f64",
    )
    yield case(aten.special_zeta.other_scalar, x, 2.5)
    yield case(aten.special_zeta.self_scalar, 3.0, q)


def _scan_cases():
    ties = torch.tensor(
        [[1.0, 3, 3, 2, 5, 5], [math.nan, 0, 4, math.nan, 9, 1], [2, 1, 1, 0, 0, 7]]
    )
    for name in ("cummax", "cummin"):
        op = getattr(aten, name).default
        yield case(op, ties, 1, id=f"{name}-ties-nan")
        yield case(op, t(4, 3, dtype=i64, low=-3, high=3), 0, id=f"{name}-int")
        yield case(op, t(3, 5, dtype=bf16), -1, id=f"{name}-bf16")
        yield case(op, torch.tensor(2.0), 0, id=f"{name}-0d")
    yield case(aten.logcumsumexp.default, t(3, 9, low=-30, high=30), 1)
    yield case(
        aten.logcumsumexp.default,
        torch.tensor([-100.0, 0.0, 100.0, -math.inf, math.inf, 3.0]),
        0,
        id="logcumsumexp-extremes",
    )
    yield case(aten.logcumsumexp.default, t(5, 2, dtype=bf16), 0, id="logcumsumexp-bf16")


def _order_statistic_cases():
    x = distinct(3, 7)
    yield case(aten.kthvalue.default, x, 3, 1)
    yield case(aten.kthvalue.default, x, 2, 0, True, id="kthvalue-keepdim")
    yield case(aten.kthvalue.default, distinct(6, dtype=bf16), 4, id="kthvalue-bf16")
    with_nan = torch.tensor([[3.0, math.nan, 1.0, math.nan], [4.0, 2.0, 8.0, 6.0], [math.nan] * 4])
    for name in ("median", "nanmedian"):
        # an all-NaN row's nanmedian index is whatever torch's nth_element leaves: not compared
        yield case(
            getattr(aten, name).dim,
            with_nan if name == "median" else with_nan[:2],
            1,
            id=f"{name}-nan",
        )
        yield case(getattr(aten, name).dim, x, 0, True, id=f"{name}-keepdim")
        yield case(getattr(aten, name).default, distinct(4, 5), id=f"{name}-all")
        yield case(
            getattr(aten, name).default, torch.tensor([2.0, math.nan, 1.0]), id=f"{name}-all-nan"
        )
    yield case(aten.median.dim, distinct(2, 6, dtype=i64), -1, id="median-int")
    yield case(aten.median.default, distinct(5, dtype=bf16), id="median-bf16")


def _reducing_scatter_cases():
    index = torch.tensor([[0, 3, 3, 1], [2, 1, 0, 3]])
    for reduce in ("amax", "amin", "prod"):
        for include_self in (True, False):
            yield case(
                aten.scatter_reduce.two,
                t(3, 5),
                1,
                index,
                t(2, 4),
                reduce,
                include_self=include_self,
                id=f"scatter_reduce-{reduce}-{include_self}",
            )
        yield case(
            aten.index_reduce.default,
            t(5, 3),
            0,
            torch.tensor([4, 0, 4, 1]),
            t(4, 3),
            reduce,
            include_self=False,
            id=f"index_reduce-{reduce}",
        )
    yield case(
        aten.scatter_reduce.two,
        t(4, dtype=i64, low=-5, high=5),
        0,
        torch.tensor([0, 0, 3]),
        t(3, dtype=i64, low=-5, high=5),
        "amin",
        include_self=False,
        id="scatter_reduce-amin-int",
    )
    yield case(
        aten.scatter_reduce.two,
        t(2, 4, dtype=bf16),
        0,
        index[:, :3] % 2,
        t(2, 3, dtype=bf16),
        "amax",
        id="scatter_reduce-amax-bf16",
    )
    yield case(
        aten.scatter_reduce.two,
        special(),
        0,
        torch.tensor([0, 2, 2, 7]),
        torch.tensor([1.0, 5.0, math.nan, -1.0]),
        "amax",
        id="scatter_reduce-amax-nan",
    )
    for reduce in ("add", "multiply"):
        yield case(
            aten.scatter.reduce,
            t(3, 5),
            1,
            index,
            t(2, 4),
            reduce=reduce,
            id=f"scatter-reduce-{reduce}",
        )
        yield case(
            aten.scatter.value_reduce,
            t(3, 5, dtype=bf16),
            0,
            index[:, :3] % 3,
            1.5,
            reduce=reduce,
            id=f"scatter-value-reduce-{reduce}-bf16",
        )
    for include_self in (True, False):
        yield case(
            aten.index_reduce.default,
            t(3, 4, 2),
            1,
            torch.tensor([3, 0, 3]),
            t(3, 3, 2),
            "mean",
            include_self=include_self,
            id=f"index_reduce-mean-{include_self}",
        )
    yield case(
        aten.index_reduce.default,
        t(4, dtype=i64, low=0, high=9),
        0,
        torch.tensor([1, 1, 2]),
        t(3, dtype=i64, low=0, high=9),
        "mean",
        id="index_reduce-mean-int",
    )
    yield case(
        aten.index_reduce.default,
        t(4, 2, dtype=bf16),
        0,
        torch.tensor([3, 3]),
        t(2, 2, dtype=bf16),
        "prod",
        id="index_reduce-prod-bf16",
    )
    sequence = torch.tensor([[3.0, 0.0, 2.0, 1.0], [9.0, 4.0, 6.0, 5.0]])
    yield case(
        aten.searchsorted.Tensor,
        sequence,
        torch.tensor([[0.5, 2.0], [7.0, 3.0]]),
        sorter=sequence.argsort(-1),
        id="searchsorted-sorter",
    )


def _spd(n, dtype=f32):
    """A well-conditioned symmetric positive definite matrix, ``A @ A.T + n I``."""
    a = t(n, n, dtype=torch.float64)
    return (a @ a.T + n * torch.eye(n, dtype=torch.float64)).to(dtype)


def _factorization_cases():
    spd, b = _spd(4), t(4, 2)
    lower = torch.linalg.cholesky(spd)
    yield case(aten.cholesky.default, spd)
    yield case(aten.cholesky.default, spd, True, id="cholesky-upper")
    yield case(
        aten.linalg_cholesky_ex.default,
        _spd(3, torch.float64),
        tol=(1e-12, 1e-12),
        id="cholesky_ex-f64",
    )
    yield case(aten.cholesky_inverse.default, lower, tol=(1e-4, 1e-5))
    yield case(aten.cholesky_solve.default, b, lower, tol=(1e-4, 1e-5))
    square = t(4, 4) + 4 * torch.eye(4)
    yield case(aten.linalg_solve_triangular.default, lower, b, upper=False, tol=(1e-4, 1e-5))
    yield case(
        aten.triangular_solve.default, b, lower.T.contiguous(), True, False, tol=(1e-4, 1e-5)
    )
    yield case(aten._linalg_det.default, square, tol=(1e-4, 1e-4))
    # torch factors Aᵀ of a contiguous A (its backward reads that LU), A of a transposed one
    yield case(aten._linalg_det.default, square.mT, tol=(1e-4, 1e-4), id="_linalg_det-transposed")
    yield case(aten._linalg_slogdet.default, t(3, 4, 4), tol=(1e-4, 1e-4))
    yield case(aten._linalg_solve_ex.default, square, b, tol=(1e-4, 1e-5))
    yield case(aten.linalg_inv_ex.default, square, tol=(1e-4, 1e-5))
    yield case(aten.linalg_lu.default, t(4, 4), tol=(1e-4, 1e-5))
    yield case(aten.linalg_lu_factor_ex.default, t(2, 4, 4), tol=(1e-4, 1e-5))
    lu, pivots = torch.linalg.lu_factor(square)
    yield case(aten.linalg_lu_solve.default, lu, pivots, b, tol=(1e-4, 1e-5))
    yield case(aten.lu_unpack.default, lu, pivots)
    yield case(aten.linalg_matrix_exp.default, t(3, 3, low=-1, high=1), tol=(1e-4, 1e-5))
    yield case(aten.linalg_qr.default, t(5, 3), "reduced", tol=(1e-4, 1e-5))
    reflectors, tau = torch.geqrf(t(5, 3))
    yield case(aten.linalg_householder_product.default, reflectors, tau, tol=(1e-4, 1e-5))
    # eigenvectors are unique up to sign only: the eigenvalues are compared
    yield case(aten._linalg_eigh.default, _spd(4), "L", False, tol=(1e-4, 1e-4))
    yield case(aten._linalg_svd.default, t(3, 3), False, False, tol=(1e-4, 1e-4))
    yield case(
        aten.linalg_pinv.atol_rtol_tensor,
        t(4, 3),
        atol=torch.tensor(0.0),
        rtol=torch.tensor(1e-5),
        tol=(1e-4, 1e-4),
    )


def _integer_and_random_cases():
    # shifts by the width and past it: left gives 0, right the sign
    x, shift = t(7, dtype=i64, low=-50, high=50), torch.tensor([0, 1, 3, 63, 2, 64, 70])
    yield case(aten.__lshift__.Scalar, x, 3)
    yield case(aten.__lshift__.Tensor, x, shift)
    yield case(aten.__rshift__.Scalar, x, 2)
    yield case(aten.__rshift__.Tensor, x, shift)
    small, amounts = (
        t(7, dtype=i32, low=-50, high=50),
        torch.tensor([0, 1, 31, 32, 40, 3, 2], dtype=i32),
    )
    yield case(aten.bitwise_left_shift.Tensor, small, amounts)
    yield case(aten.bitwise_left_shift.Tensor_Scalar, small, 4)
    yield case(aten.bitwise_left_shift.Scalar_Tensor, 5, shift)
    yield case(aten.bitwise_right_shift.Tensor, small, amounts)
    yield case(aten.bitwise_right_shift.Tensor_Scalar, small, 2)
    yield case(aten.bitwise_right_shift.Scalar_Tensor, -100, shift)
    a = torch.tensor([0, 12, -18, 7, 0, 100, -36])
    g = torch.tensor([0, 8, 24, -21, 5, 75, -48])
    yield case(aten.gcd.default, a, g)
    yield case(aten.lcm.default, a, g)
    yield case(aten.frexp.Tensor, special())
    yield case(aten.ldexp.Tensor, t(6), torch.tensor([0, 1, -3, 10, -20, 5]))
    yield case(aten.nextafter.default, special(), torch.tensor([1, 1, 0, -5, 0, 1, 0, math.inf]))
    yield case(aten.cauchy.default, t(3, 4), 0.5, 2.0, values=False)
    yield case(aten.exponential.default, t(3, 4), 1.5, values=False)
    yield case(aten.geometric.default, t(3, 4), 0.3, values=False)
    yield case(aten.log_normal.default, t(3, 4), 0.0, 0.5, values=False)
    x = t(3, 5)
    noise = torch.empty(3, 5)
    yield case(aten.rrelu_with_noise_functional.default, x, noise, 0.125, 0.333, True, values=False)
    noise = torch.where(x < 0, torch.rand(3, 5, generator=_generator), torch.ones(3, 5))
    yield case(aten.rrelu_with_noise_backward.default, t(3, 5), x, noise, 0.125, 0.333, True, False)


def _surface_cases():
    x = t(2, 3, 4)
    yield case(aten._efficientzerotensor.default, [2, 3], dtype=f32)
    yield case(aten.new_empty_strided.default, x, [2, 3], [3, 1], values=False)
    yield case(aten.as_strided_copy.default, x, [3, 2], [4, 1], 1)
    yield case(aten.narrow_copy.default, x, 2, 1, 2)
    yield case(aten.permute_copy.default, x, [2, 0, 1])
    yield case(aten.unbind_copy.int, x, 1)
    yield case(aten.view_copy.default, x, [4, 6])
    yield case(aten.nonzero_static.default, torch.tensor([[0, 1, 2], [3, 0, 0]]), size=5)
    mask = t(3, 4, dtype=boolean)
    yield case(aten.masked_scatter_backward.default, t(3, 4), mask, [12])
    yield case(aten.mode.default, torch.tensor([[1.0, 2, 2, 3, 3, 3], [5, 4, 4, 5, 0, 1]]), 1)
    yield case(aten.dist.default, t(3, 4), t(4), 3.0)
    yield case(aten.histc.default, t(20), 5, -1.0, 1.5)
    yield case(aten.histogram.bin_ct, t(20), 6)
    yield case(aten.histogram.bins_tensor, t(20), torch.tensor([-1.5, -0.5, 0.0, 1.0, 2.0]))
    yield case(aten.addbmm.default, t(3, 5), t(2, 3, 4), t(2, 4, 5), beta=0.5, alpha=2.0)
    yield case(
        aten._trilinear.default,
        t(2, 3),
        t(5, 3, 4),
        t(2, 4),
        [1, 3],
        [0],
        [1, 2],
        [2, 3],
        tol=(1e-4, 1e-5),
    )
    data = t(6, 3)
    lengths = torch.tensor([2, 0, 3, 1])
    yield case(aten.segment_reduce.default, data, "max", lengths=lengths, initial=0.0)
    yield case(
        aten._segment_reduce_backward.default,
        t(4, 3),
        aten.segment_reduce(data, "sum", lengths=lengths),
        data,
        "sum",
        lengths=lengths,
    )
    weight, bias, mean, var = t(3, low=0.5), t(3), t(3), t(3, low=0.5, high=2)
    inp = t(2, 3, 4)
    yield case(
        aten._batch_norm_with_update_functional.default, inp, weight, bias, mean, var, 0.1, 1e-5
    )
    save_mean, save_invstd = inp.mean((0, 2)), (inp.var((0, 2), unbiased=False) + 1e-5).rsqrt()
    yield case(
        aten.batch_norm_backward.default,
        t(2, 3, 4),
        inp,
        weight,
        mean,
        var,
        save_mean,
        save_invstd,
        True,
        1e-5,
        [True, True, True],
        torch.empty(0, dtype=torch.uint8),
        tol=(1e-4, 1e-5),
    )
    image = t(1, 2, 4, 5)
    yield case(aten._upsample_bilinear2d_aa.default, image, [3, 7], False, None, None)
    yield case(
        aten._upsample_bilinear2d_aa_backward.default, t(1, 2, 3, 7), [3, 7], [1, 2, 4, 5], False
    )
    volume = distinct(1, 2, 3, 4, 5)
    yield case(aten.adaptive_max_pool3d.default, volume, [2, 3, 2])
    _, indices = aten.adaptive_max_pool3d(volume, [2, 3, 2])
    yield case(aten.adaptive_max_pool3d_backward.default, t(1, 2, 2, 3, 2), volume, indices)
    vol, grid = t(1, 2, 3, 4, 5), t(1, 2, 3, 2, 3, low=-1.2, high=1.2)
    yield case(aten.grid_sampler_3d.default, vol, grid, 0, 0, False)
    yield case(
        aten.grid_sampler_3d_backward.default,
        t(1, 2, 2, 3, 2),
        vol,
        grid,
        0,
        1,
        True,
        [True, True],
        tol=(1e-4, 1e-4),
    )


def _qr_compact_and_histogramdd_cases():
    yield case(aten.geqrf.default, t(5, 3), tol=(1e-4, 1e-5))
    reflectors, tau = torch.geqrf(t(4, 3))
    yield case(aten.ormqr.default, reflectors, tau, t(4, 2), True, True, tol=(1e-4, 1e-5))
    yield case(
        aten.ormqr.default,
        reflectors,
        tau,
        t(2, 4),
        False,
        False,
        tol=(1e-4, 1e-5),
        id="ormqr-right",
    )
    points = t(20, 2)
    yield case(aten._histogramdd_bin_edges.default, points, [3, 4])
    yield case(aten._histogramdd_from_bin_cts.default, points, [3, 4], range=[-2.0, 2.0, -1.0, 1.0])
    edges = [torch.tensor([-2.0, 0.0, 2.0]), torch.tensor([-1.5, -0.5, 0.5, 1.5])]
    yield case(aten._histogramdd_from_bin_tensors.default, points, edges, weight=t(20))


def _linear_cross_entropy_and_complex_sigmoid_cases():
    chunked = torch.ops.torch_nn._linear_cross_entropy_batch_chunked.default
    x, w, bias, weight = t(6, 5), t(7, 5), t(7), t(7, low=0.5, high=2.0)
    target = torch.tensor([0, 3, -100, 6, 2, 3])
    for reduction in ("mean", "sum"):
        yield case(
            chunked,
            *(x, w, target, bias, weight, reduction, -100, 0.0, 4, "accurate", f32, True),
            *(True, True, True),
            id=f"linear_cross_entropy_batch_chunked-{reduction}",
        )
    yield case(
        chunked,
        *(x, w, target, None, None, "mean", -100, 0.0, 4, "accurate", f32, True, False, True),
        False,
        id="linear_cross_entropy_batch_chunked-weight-grad-only",
    )
    yield case(
        torch.ops.torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default,
        *(x, w, target, bias, weight, -100, 4, "accurate", f32),
    )
    z = torch.tensor([0.5 + 1j, -2 + 3j, 0j, -100 + 0.3j, 30 - 2j, complex("nan+1j")])
    yield case(aten.sigmoid.default, z.to(torch.complex64), id="sigmoid-complex")


def _fractional_pool_and_multinomial_cases():
    weights = torch.tensor([[0.2, 0.0, 1.5, 0.3], [1.0, 2.0, 0.0, 0.5]])
    yield case(aten.multinomial.default, weights, 5, True, values=False)
    yield case(aten.multinomial.default, weights, 3, values=False, id="multinomial-no-replacement")
    image, samples = distinct(2, 3, 9, 8), torch.rand(2, 3, 2, generator=_generator)
    yield case(aten.fractional_max_pool2d.default, image, [2, 3], [4, 3], samples)
    values, indices = aten.fractional_max_pool2d(image, [2, 3], [4, 3], samples)
    yield case(
        aten.fractional_max_pool2d_backward.default,
        t(*values.shape),
        image,
        [2, 3],
        [4, 3],
        indices,
    )
    volume, samples = distinct(1, 2, 5, 6, 7), torch.rand(1, 2, 3, generator=_generator)
    yield case(aten.fractional_max_pool3d.default, volume, [2, 2, 3], [3, 4, 2], samples)
    values, indices = aten.fractional_max_pool3d(volume, [2, 2, 3], [3, 4, 2], samples)
    yield case(
        aten.fractional_max_pool3d_backward.default,
        t(*values.shape),
        volume,
        [2, 2, 3],
        [3, 4, 2],
        indices,
    )


CASES = [
    *_unary_cases(),
    *_binary_cases(),
    *_predicate_cases(),
    *_scalar_cases(),
    *_creation_cases(),
    *_shape_cases(),
    *_complex_cases(),
    *_linalg_cases(),
    *_reduction_cases(),
    *_nn_cases(),
    *_conv_cases(),
    *_pooling_cases(),
    *_indexing_cases(),
    *_sorting_cases(),
    *_random_cases(),
    *_special_function_cases(),
    *_bessel_and_polynomial_cases(),
    *_scan_cases(),
    *_order_statistic_cases(),
    *_reducing_scatter_cases(),
    *_strided_cases(),
    *_embedding_bag_cases(),
    *_grid_sample_cases(),
    *_factorization_cases(),
    *_integer_and_random_cases(),
    *_surface_cases(),
    *_qr_compact_and_histogramdd_cases(),
    *_linear_cross_entropy_and_complex_sigmoid_cases(),
    *_fractional_pool_and_multinomial_cases(),
]

TOLERANCE = {
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (1e-3, 1e-3),
    torch.float32: (1e-5, 1e-5),
    # complex products and sums: ATen's scalar loops may fuse a multiply-add, its sin/cos and
    # reductions round elsewhere than NumPy's
    torch.complex64: (1e-5, 1e-5),
    torch.complex128: (1e-14, 1e-14),
}


def _outputs(value):
    return value if isinstance(value, tuple) else (value,)


def _types(expected):
    types = [None if e is None else value_type(e.shape, e.dtype) for e in _outputs(expected)]
    return tuple(types) if isinstance(expected, tuple) else types[0]


def _is_complex(value):
    if isinstance(value, (tuple, list)):
        return tuple(_is_complex(v) for v in value)
    return isinstance(value, torch.Tensor) and value.is_complex()


def _context(op, args, kwargs, expected):
    """The context the compiler gives the rule (``lowering.invoke``), complex flags included."""
    complex_out = _is_complex(_outputs(expected)[0])
    complex_args = _is_complex(args)
    flat = [f for a in complex_args for f in (a if isinstance(a, tuple) else (a,))]
    complex_ = complex_out or any(flat) or any(_is_complex(tuple(kwargs.values())))
    return LoweringContext(
        op,
        "case",
        _types(expected),
        rng=_stream(op),
        layouts=tuple(Layout.of(a) for a in args),
        complex=complex_,
        complex_args=complex_args if complex_ else (),
        complex_out=complex_out,
    )


def _check(got, expected, tol, values, exact):
    """``exact()`` is the op in float64, for half-float results eager rounds less exactly on some CPUs."""
    got, expected = _outputs(got), _outputs(expected)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        if e is None:  # an output the node does not ask for
            continue
        g = numpy_to_torch(np.asarray(g))
        if e.is_complex():  # the rule gives the real view
            g = torch.view_as_complex(g.contiguous())
        assert (tuple(g.shape), g.dtype) == (tuple(e.shape), e.dtype)
        if values:
            rtol, atol = tol or TOLERANCE.get(e.dtype, (0, 0))
            assert_close_to_eager(
                g, e, rtol=rtol, atol=atol, exact=lambda i=i: _outputs(exact())[i]
            )


def _numpy(value):
    return torch_to_numpy(value) if isinstance(value, torch.Tensor) else value


#: the random key input of random ops' cases (the backend draws one per call from a generator):
#: a Philox key and first counter, as ``nkipy::rng_key`` gives them
KEY = key_tensor(7 | 3 << 32, 0)


def _stream(op):
    return RandomStream(KEY.numpy(), 0) if torch.Tag.nondeterministic_seeded in op.tags else None


def _traced(op, rule, args, kwargs, expected):
    """Lower the op as a one-node FX graph, the way the compiler lowers a fused subgraph, and
    run the kernel's generated NumPy source."""
    if (
        _stream(op) is not None
    ):  # the key is a kernel input, as ``nkipy_core.compiler.rng`` arranges
        kwargs = {**kwargs, RNG_KWARG: (KEY, 0)}
    graph = torch.fx.Graph()
    inputs = []

    def placeholder(value):
        if not isinstance(value, torch.Tensor):
            return value
        node = graph.placeholder(f"arg{len(inputs)}")
        node.meta["val"] = value
        inputs.append(value)
        return node

    fx_args, fx_kwargs = tree_map(placeholder, (args, kwargs))
    node = graph.call_function(op, fx_args, fx_kwargs)
    node.meta["val"], node.meta[RULE] = expected, rule
    if isinstance(expected, tuple):
        wanted = [i for i, e in enumerate(expected) if e is not None]
        graph.output(tuple(graph.call_function(operator.getitem, (node, i)) for i in wanted))
    else:
        graph.output(node)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    kernel = lower_subgraph(gm, "case")
    # a transposed input goes in permuted into its memory order, as the kernel's call passes it
    arrays = [
        torch_to_numpy(i if o is None else i.permute(o)) for i, o in zip(inputs, input_orders(gm))
    ]
    with np.errstate(all="ignore"):  # as the cpu runtime runs kernels: inf and nan are values
        outputs = codegen.load(codegen.generate(kernel))(*arrays)
    # a transposed output comes in its memory order (a complex one's pair dim last); the
    # kernel's call permutes it back
    results = iter(
        r if o is None else np.transpose(r, [*np.argsort(o), *range(len(o), r.ndim)])
        for r, o in zip(outputs, output_orders(gm))
    )
    if isinstance(expected, tuple):
        return tuple(None if e is None else next(results) for e in expected)
    return next(results)


@pytest.mark.parametrize(("op", "args", "kwargs", "tol", "values"), CASES)
def test_rule_matches_torch(op, args, kwargs, tol, values):
    expected = op(*args, **kwargs)
    if isinstance(expected, list):
        expected = tuple(expected)
    (rule,) = REGISTRY.rules_for(op)
    ctx = _context(op, args, kwargs, expected)
    np_args, np_kwargs = tree_map(_numpy, (args, kwargs))

    def exact():
        return op(*upcast(args), **upcast(kwargs))

    _check(rule.fn(ctx, *np_args, **np_kwargs), expected, tol, values, exact)
    _check(_traced(op, rule, args, kwargs, expected), expected, tol, values, exact)


def test_every_registered_overload_has_a_case():
    tested = {REGISTRY.rules_for(p.values[0])[0].op for p in CASES}
    assert sorted(set(REGISTRY.ops()) - tested) == []


def _rule(op):
    (rule,) = REGISTRY.rules_for(op)
    return rule.fn


@pytest.mark.parametrize(
    ("op", "args", "kwargs", "reason"),
    [
        pytest.param(
            aten.as_strided.default,
            (t(4, 6).T, [3], [2]),
            {},
            "as_strided of a non-contiguous tensor",
            id="as_strided-transposed",
        ),
        pytest.param(
            aten.as_strided.default,
            (t(4, 6)[:2], [4], [4]),
            {},
            r"reads storage elements 0\.\.12 outside the tensor's 12",
            id="as_strided-beyond-the-view",
        ),
        pytest.param(
            aten.as_strided_scatter.default,
            (t(4, 6), t(3, 3), [3, 3], [1, 1]),
            {},
            "overlapping strides",
            id="as_strided_scatter-overlapping",
        ),
        pytest.param(
            aten._embedding_bag_backward.default,
            (
                t(2, 3),
                torch.tensor([0, 1, 1]),
                torch.tensor([0, 2]),
                torch.tensor([0, 0, 1]),
                torch.tensor([2, 1]),
                torch.tensor([2, 1]),
                4,
                True,
                0,
                False,
                None,
            ),
            {},
            "scale_grad_by_freq",
            id="embedding_bag_backward-freq",
        ),
        pytest.param(
            aten._embedding_bag_backward.default,
            (
                t(2, 3),
                torch.tensor([0, 1, 1]),
                torch.tensor([0, 2]),
                torch.tensor([0, 0, 1]),
                torch.tensor([2, 1]),
                torch.tensor([2, 1]),
                4,
                False,
                0,
                True,
                None,
            ),
            {},
            "sparse=True",
            id="embedding_bag_backward-sparse",
        ),
    ],
)
def test_rule_declines_with_its_reason(op, args, kwargs, reason):
    """What a rule cannot lower exactly it declines (the node then runs on CPU, named in the
    fallback warning) instead of computing something else."""
    ctx = LoweringContext(op, "case", None, layouts=tuple(Layout.of(a) for a in args))
    np_args = tree_map(_numpy, args)
    with pytest.raises(Unsupported, match=reason):
        _rule(op)(ctx, *np_args, **kwargs)
