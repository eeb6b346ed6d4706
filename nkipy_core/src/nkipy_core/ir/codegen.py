"""NumPy code generation: a kernel as a readable, standalone ``kernel.py``.

The generated module defines ``kernel(*params) -> tuple`` (with ``out=``, the arrays its large
outputs may be written into: ``recycled_outputs``) and depends only on NumPy and ml_dtypes.
The cpu runtime executes the source this module generates from a kernel, whether the kernel was
just lowered or parsed from a cache entry's IR (``runtime.cpu``); the ``kernel.py`` of a cache
entry is the same source, written for people to read and run, and never executed by nkipy.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from ml_dtypes import bfloat16

from nkipy_core.ir.graph import Kernel, Op, Value
from nkipy_core.ir.half_float import HalfFloat, half_float_rule
from nkipy_core.ir.numpy_support import HELPERS
from nkipy_core.ir.primitives import PRIMITIVES, primitive
from nkipy_core.ir.types import DType, TensorType

#: the names generated code may use; also the globals the cpu runtime executes it with
NAMESPACE: dict[str, Any] = {
    "np": np,
    "math": math,
    "bfloat16": bfloat16,
    **{f.__name__: f for f in HELPERS},
}


def expression(
    prim_name: str,
    args: Sequence[str],
    params: dict[str, Any],
    operand_types: Sequence[TensorType],
    result_type: TensorType,
) -> str:
    """The NumPy expression for one op, half floats computed as ``half_float_rule`` says."""
    rule = half_float_rule(prim_name, operand_types, result_type)
    if rule is HalfFloat.COMPUTE_IN_F32:
        args = [
            f"{a}.astype(np.float32)" if t.dtype.is_half else a for a, t in zip(args, operand_types)
        ]
    elif rule is HalfFloat.CONVERT_THROUGH_F32:
        args = [f"{args[0]}.astype(np.float32)"]
    expr = primitive(prim_name).emit(*args, **params)
    if rule is HalfFloat.COMPUTE_IN_F32:
        expr = f"({expr}).astype({result_type.dtype.numpy_name})"
    return expr


#: a value computed from constants alone is computed once, when the kernel is loaded, unless it
#: would hold more bytes than this for the kernel's lifetime (broadcasts and iotas are views: free)
HOIST_LIMIT = 1 << 20

#: the primitives whose NumPy result is a view of a small array, whatever their shape
_VIEWS = frozenset({"broadcast", "iota"})


def _load_time(kernel: Kernel) -> set[int]:
    """Ids of the values that depend on no parameter: constants, iotas and what folds from them."""
    found: set[int] = set()
    for op in kernel.ops:
        t = op.result.type
        if (
            primitive(op.prim).folds
            and all(v.id in found for v in op.operands)
            and (op.prim in _VIEWS or t.size * t.dtype.numpy.itemsize <= HOIST_LIMIT)
        ):
            found.add(op.result.id)
    return found


def _implicit_broadcasts(kernel: Kernel) -> dict[int, tuple[Value, ...]]:
    """For each op that may take smaller operands (``Primitive.broadcasting``), the operands to
    pass instead of its broadcasts' results: their sources, when NumPy broadcasting of the sources
    gives the op's shape. ``np.broadcast_to`` is the most expensive view NumPy makes."""
    broadcast_of = {op.result.id: op.operands[0] for op in kernel.ops if op.prim == "broadcast"}
    operands: dict[int, tuple[Value, ...]] = {}
    for op in kernel.ops:
        if not primitive(op.prim).broadcasting:
            continue
        sources = []
        for v in op.operands:
            while v.id in broadcast_of:
                v = broadcast_of[v.id]
            sources.append(v)
        if np.broadcast_shapes(*(v.type.shape for v in sources)) == op.result.type.shape:
            operands[op.result.id] = tuple(sources)
    return operands


#: primitives whose NumPy result is an array of its own (for a result of rank 1 or more) and that
#: keep no view of their operands: a value made by one, and read only by such ones, holds a buffer
#: that nothing else can reach once its last reader has run
_OWN_RESULT = frozenset(
    {name for name in PRIMITIVES if PRIMITIVES[name].ufunc} | {"select", "convert", "reduce"}
)


#: an output at least this large is written into the buffer of the same output of an earlier call
#: once nothing holds that any more (``recycled_outputs``); smaller arrays come from malloc's
#: free lists at no cost (glibc's default threshold for allocating by ``mmap``)
RECYCLE_MIN_BYTES = 1 << 17


def _writes_out(op: Op, operands: Sequence[Value], load_time: set[int]) -> bool:
    """Whether an op's line may take ``out=``: a single ufunc, not of half floats (which compute
    in f32 and round, ``half_float_rule``), with an array result computed per call."""
    t = op.result.type
    return bool(
        PRIMITIVES[op.prim].ufunc
        and t.rank
        and op.result.id not in load_time
        and half_float_rule(op.prim, [v.type for v in operands], t) is HalfFloat.EXACT
    )


def recycled_outputs(kernel: Kernel) -> tuple[int, ...]:
    """Indexes of the outputs that ``kernel(..., out=...)`` writes into the arrays it is given.

    A large result a kernel allocates anew on every call costs more than computing it: the
    allocator returns big freed blocks to the system, and the next call's new array faults every
    page in again (600 µs for a 1 MiB multiply that computes in 30). The cpu runtime passes each
    such output the array that output was on an earlier call once nothing else holds it
    (``CpuExecutable``), as an optimizer step or a training step's gradients free theirs."""
    load_time = _load_time(kernel)
    made_by = {op.result.id: op for op in kernel.ops}
    found: list[int] = []
    seen: set[int] = set()
    for i, v in enumerate(kernel.outputs):
        op = made_by.get(v.id)
        if (
            op is not None
            and v.id not in seen
            and v.type.size * v.type.dtype.numpy.itemsize >= RECYCLE_MIN_BYTES
            and _writes_out(op, op.operands, load_time)
        ):
            found.append(i)
        seen.add(v.id)
    return tuple(found)


def _buffer_reuse(
    emitted: Sequence[tuple[Op, tuple[Value, ...]]],
    load_time: set[int],
    outputs: Sequence[Value],
    recycled: set[int],
) -> dict[int, Value]:
    """For each op that may write its result into the buffer of a value no longer needed, that
    value (``v7 = np.add(v5, v6, out=v5)``): a kernel then allocates about what inductor's
    generated code would, not a new array per op, and the buffers it writes are still in the
    cache.

    An elementwise op writes into an operand of its type that it reads last (NumPy's ufuncs
    allow it: each element is read before it is written), else into a dead buffer of its type.
    A ``dot`` writes only into a dead buffer known to be row-major (one ``np.matmul`` made; BLAS
    needs that layout), never into an operand (NumPy would copy the operand first). Half-float
    ops compute in f32 and round (``half_float_rule``): they keep their own form. Outputs,
    parameters and load-time values never lend their buffers, nor does a value that something
    holds a view of; ``recycled`` values (``recycled_outputs``) are written where the caller
    says."""
    last_use: dict[int, int] = {}
    viewed: set[int] = set()
    for i, (op, operands) in enumerate(emitted):
        for v in operands:
            last_use[v.id] = i
            if op.prim not in _OWN_RESULT:
                viewed.add(v.id)
    kept = {v.id for v in outputs} | load_time | viewed
    lends = {
        op.result.id
        for op, _ in emitted
        if op.prim in _OWN_RESULT and op.result.type.rank and op.result.id not in kept
    }
    row_major: set[int] = set()  # values whose buffer np.matmul made
    free: dict[tuple[TensorType, bool], list[Value]] = {}  # dead buffers by type and layout
    reuse: dict[int, Value] = {}
    for i, (op, operands) in enumerate(emitted):
        t = op.result.type
        if op.result.id not in recycled and _writes_out(op, operands, load_time):
            dying = [
                v
                for v in operands
                if op.prim != "dot" and v.id in lends and v.type == t and last_use[v.id] == i
            ]
            pools = [(t, True)] if op.prim == "dot" else [(t, False), (t, True)]
            pool = next((free[k] for k in pools if free.get(k)), [])
            buffer = dying[0] if dying else pool.pop() if pool else None
            if buffer is not None:
                reuse[op.result.id] = buffer
                if buffer.id in row_major:
                    row_major.add(op.result.id)
        if op.prim == "dot" and op.result.id not in reuse:
            row_major.add(op.result.id)
        for v in dict.fromkeys(operands):
            if v.id in lends and last_use[v.id] == i and reuse.get(op.result.id) is not v:
                free.setdefault((v.type, v.id in row_major), []).append(v)
    return reuse


def _emitted(kernel: Kernel) -> list[tuple[Op, tuple[Value, ...]]]:
    """The ops ``generate`` writes, in its order, each with the operands its line reads: the ops
    an output needs, with broadcasts left to NumPy (``_implicit_broadcasts``)."""
    substituted = _implicit_broadcasts(kernel)
    live = {v.id for v in kernel.outputs}
    emitted: list[tuple[Op, tuple[Value, ...]]] = []
    for op in reversed(kernel.ops):
        if op.result.id in live:
            operands = substituted.get(op.result.id, op.operands)
            live.update(v.id for v in operands)
            emitted.append((op, operands))
    emitted.reverse()
    return emitted


def writes_into_param(kernel: Kernel, output: int, param: int) -> bool:
    """Whether ``kernel(..., out=...)`` may be given parameter ``param``'s own array as the array
    of output ``output``, so that the kernel updates its input in place (an optimizer step's
    parameters and states: no new array, and no copy back into the parameter afterwards).

    That is sound when the output is one the kernel writes where it is told
    (``recycled_outputs``), the line writing it comes after every line that reads the parameter
    or a value that may be a view of it (NumPy's ufuncs read each element before writing it,
    and copy an operand that overlaps the result in another layout), and no other output is
    such a view (it would hold the new values, not the old)."""
    if output not in recycled_outputs(kernel):
        return False
    target = kernel.outputs[output].id
    aliases = {kernel.params[param].id}
    writer = last_read = -1
    for i, (op, operands) in enumerate(_emitted(kernel)):
        if any(v.id in aliases for v in operands):
            last_read = i
            if op.prim not in _OWN_RESULT:
                aliases.add(op.result.id)
        if op.result.id == target and writer < 0:
            writer = i
    others = {v.id for i, v in enumerate(kernel.outputs) if i != output and v.id != target}
    return last_read <= writer and not others & aliases


@functools.lru_cache(maxsize=1)
def _helpers_source() -> str:
    """The helpers' source, copied into every module: read once (``inspect`` reads and tokenizes
    the file, most of the time ``generate`` took, which the cpu runtime spends on every load)."""
    return "\n\n".join(inspect.getsource(f) for f in HELPERS)


#: a 2-D product ``x @ w.T`` of at most this many rows with a weight of at least
#: ``SKINNY_MIN_WEIGHT`` elements is computed as ``(w @ x.T).T`` (``_skinny_matmul``)
SKINNY_ROWS = 64
SKINNY_MIN_WEIGHT = 1 << 16


def _skinny_products(kernel: Kernel, emitted: Sequence[tuple[Op, tuple[Value, ...]]]) -> set[int]:
    """The ``dot``s that ``_skinny_matmul`` computes: f32 or f64 ``x @ w.T`` (the right operand a
    transpose of a 2-D value) of a few rows with a large weight."""
    transposed = {
        op.result.id for op in kernel.ops if op.prim == "transpose" and op.params["perm"] == (1, 0)
    }
    skinny = set()
    for op, operands in emitted:
        if op.prim != "dot":
            continue
        x, w_t = operands
        if (
            w_t.id in transposed
            and x.type.rank == 2
            and x.type.dtype in (DType.f32, DType.f64)
            and x.type.shape[0] <= SKINNY_ROWS
            and w_t.type.size >= SKINNY_MIN_WEIGHT
        ):
            skinny.add(op.result.id)
    return skinny


def generate(kernel: Kernel) -> str:
    """Source of a module whose ``kernel`` function computes ``kernel``.

    Three things differ from one line per op in program order: values that depend on no
    parameter are computed at module level, once; a broadcast feeding an elementwise op is left to
    NumPy's implicit broadcasting (and not written at all if nothing else reads it); and an op
    writes into a buffer that no value needs any more where it can (``_buffer_reuse``)."""
    helpers = _helpers_source()
    params = ", ".join(p.name for p in kernel.params)
    load_time = _load_time(kernel)
    emitted = _emitted(kernel)
    recycled = {kernel.outputs[i].id: i for i in recycled_outputs(kernel)}
    reuse = _buffer_reuse(emitted, load_time, kernel.outputs, set(recycled))

    skinny = _skinny_products(kernel, emitted)

    def line(op: Op, operands: tuple[Value, ...], indent: str, wrap: str = "{}") -> str:
        names = [v.name for v in operands]
        i = op.result.id
        target = f"out[{recycled[i]}]" if i in recycled else reuse[i].name if i in reuse else None
        if i in skinny:
            expr = f"_skinny_matmul({', '.join([*names, *([target] if target else [])])})"
        elif target is not None:
            expr = f"{primitive(op.prim).ufunc}({', '.join(names)}, out={target})"
        else:
            expr = expression(op.prim, names, op.params, [v.type for v in operands], op.result.type)
        comment = f"  # {op.origin}" if op.origin else ""
        return f"{indent}{op.result.name} = {wrap.format(expr)}{comment}"

    shared = [
        line(op, ops, "", "_readonly({})") for op, ops in emitted if op.result.id in load_time
    ]
    lines = [
        f'"""NKIPy kernel `{kernel.name}`, generated by nkipy-core. Runs with NumPy and ml_dtypes alone.',
        "",
        f"Inputs:  {', '.join(str(p.type) for p in kernel.params) or '-'}",
        f"Outputs: {', '.join(str(o.type) for o in kernel.outputs)}",
        '"""',
        "import base64",
        "import importlib",
        "import math",
        "",
        "import numpy as np",
        "from ml_dtypes import bfloat16",
        "",
        "#: runs the collectives, if any; see _collective (the cpu runtime installs one)",
        "_COMMUNICATOR = None",
        "",
        "",
        helpers.rstrip(),
        "",
        "",
        *(
            [
                "# values that depend on no input: computed once, when this module is loaded",
                *shared,
                "",
                "",
            ]
            if shared
            else []
        ),
        f"def kernel({params}{_out_parameter(kernel, recycled)}):",
    ]
    lines += [line(op, ops, "    ") for op, ops in emitted if op.result.id not in load_time]
    outputs = "".join(f"{o.name}, " for o in kernel.outputs)
    lines.append(f"    return ({outputs.rstrip()})")
    lines += [
        "",
        "",
        'if __name__ == "__main__":',
        "    rng = np.random.default_rng(0)",
        "    inputs = [",
        *(f"        {_random_input(p.type)}," for p in kernel.params),
        "    ]",
        "    for out in kernel(*inputs):",
        "        print(out.dtype, out.shape)",
        "",
    ]
    return "\n".join(lines)


def _out_parameter(kernel: Kernel, recycled: dict[int, int]) -> str:
    """``kernel``'s keyword for the arrays its recycled outputs are written into (``None``: a
    new array), or nothing when it has none."""
    if not recycled:
        return ""
    none = ", ".join(["None"] * len(kernel.outputs))
    return (
        f"{', ' if kernel.params else ''}*, out=({none}{',' if len(kernel.outputs) == 1 else ''})"
    )


def _random_input(t: TensorType) -> str:
    if t.dtype is DType.bool:
        return f"rng.random({t.shape}) < 0.5"
    if t.dtype.is_float:
        return f"rng.standard_normal({t.shape}).astype({t.dtype.numpy_name})"
    return f"rng.integers(0, 4, {t.shape}).astype({t.dtype.numpy_name})"


def load(
    source: str, filename: str = "<nkipy kernel>", communicator: Callable[..., Any] | None = None
):
    """Execute source that ``generate`` made in this process (never source read from a file) and
    return its ``kernel`` function; its collectives run through
    ``communicator`` (see ``numpy_support._collective``), which is set after the module's own
    ``_COMMUNICATOR = None`` so that the source stays runnable on its own."""
    namespace: dict[str, Any] = {"__name__": "nkipy_kernel"}
    with np.errstate(
        all="ignore"
    ):  # the values computed at load time, as a call's are (cpu runtime)
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated code
    namespace["_COMMUNICATOR"] = communicator
    return namespace["kernel"]


@functools.lru_cache(maxsize=4096)
def _compiled(expr: str):
    return compile(expr, "<nkipy primitive>", "eval")


def evaluate(
    prim_name: str,
    arrays: Sequence[np.ndarray],
    params: dict[str, Any],
    result_type: TensorType,
) -> np.ndarray:
    """Run one primitive on NumPy arrays (the tracer's NumPy mode and constant folding)."""
    names = [f"a{i}" for i in range(len(arrays))]
    types = [TensorType(np.shape(a), DType.from_numpy(np.asarray(a).dtype)) for a in arrays]
    expr = expression(prim_name, names, params, types, result_type)
    with np.errstate(all="ignore"):
        out = eval(_compiled(expr), NAMESPACE, dict(zip(names, arrays)))  # noqa: S307
    return np.asarray(out)
