"""The NumPy reference of every IR primitive works on whole arrays.

The ``cpu`` runtime runs each primitive's NumPy expression (``Primitive.emit``) and the helpers
it calls (``numpy_support.HELPERS``). A Python call per element (``np.vectorize(math.erf)``)
made GELU in a kernel ~90x slower than eager torch; this keeps every primitive free of the NumPy
and Python constructs that loop over elements in the interpreter.
"""

import ast
import inspect
import math

import numpy as np
import pytest

from nkipy_core.ir.numpy_support import HELPERS
from nkipy_core.ir.primitives import PRIMITIVES

#: names that visit array elements one at a time in Python
PER_ELEMENT = {"vectorize", "frompyfunc", "nditer", "ndindex", "ndenumerate", "flat", "tolist"}
HELPER_SOURCE = {f.__name__: inspect.getsource(f) for f in HELPERS}


def _reference(name: str) -> str:
    """The primitive's NumPy code: its expression on operands ``x0, x1, ...`` where it needs no
    attributes, else the source of its emitter; then the source of every helper it calls."""
    prim = PRIMITIVES[name]
    try:
        code = prim.emit(*(f"x{i}" for i in range(2 if prim.arity is None else prim.arity)))
    except TypeError:  # attributes needed: read the emitter itself
        code = inspect.getsource(prim.emit).strip()
    sources, todo = [code], [code]
    while todo:
        for helper in {n.id for n in ast.walk(_parse(todo.pop())) if isinstance(n, ast.Name)}:
            if helper in HELPER_SOURCE and HELPER_SOURCE[helper] not in sources:
                sources.append(HELPER_SOURCE[helper])
                todo.append(HELPER_SOURCE[helper])
    return "\n".join(sources)


def _parse(code: str) -> ast.AST:
    try:
        return ast.parse(code)
    except SyntaxError:  # a lambda cut out of a call or a table entry: parse it as an expression
        return ast.parse(code[code.index("lambda") :].rstrip(",)"), mode="eval")


@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_no_primitive_visits_elements_one_by_one_in_python(name):
    code = _reference(name)
    used = {
        getattr(node, "attr", None) or getattr(node, "id", None)
        for node in ast.walk(_parse(code))
        if isinstance(node, ast.Attribute | ast.Name)
    }
    assert not used & PER_ELEMENT, f"{name}'s NumPy code loops per element:\n{code}"


#: erfc's tail is ``exp(-x*x) * R(x)``: the rounding of ``x*x`` costs up to ``x*x`` ulps (1e-14
#: relative at 10); f32 results are computed in f64 and round to math's nearest float
RTOL = {np.float64: 1e-13, np.float32: np.finfo(np.float32).eps}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_erf_and_erfc_match_math_on_whole_arrays(dtype):
    from nkipy_core.ir.numpy_support import _erf, _erfc

    x = np.concatenate(
        [np.linspace(-12, 12, 4001), [0.0, -0.0, 1.0, -1.0, 8.0, 26.0, np.inf, -np.inf, np.nan]]
    ).astype(dtype)
    for fn, ref in ((_erf, math.erf), (_erfc, math.erfc)):
        got = fn(x)
        want = np.array([ref(float(v)) for v in x]).astype(dtype)
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=RTOL[dtype], atol=0)
    assert np.signbit(_erf(np.array([-0.0], dtype)))[0]
