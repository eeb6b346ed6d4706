"""Why a compiled function compiled again: each new kernel graph says which input changed.

Kernels are static, so every new input signature a compiled function meets costs a compile: a
new dynamo graph (the first call, a guard failure, a frame resumed after a graph break) or a new
size set of a graph with symbolic sizes (``dynamo/specialize.py``). On a device whose compiler
takes minutes per graph, a function that compiles once per prompt length is a production
outage, so each compile is explained where it happens: it is compared with the nearest
signature already compiled for the same graph (the one with the fewest differences), and what
differs is named, ``input 1 (L_input_ids_) dim 1: 37 vs 32``, at INFO on the ``nkipy`` logger.

Each compile is also one line of ``<cache>/stats/recompiles.jsonl`` (appended with
``O_APPEND``: ranks and processes sharing a cache add lines without a lock), which
``nkipy-ops explain`` summarises. With ``max_kernels`` set, a function that needs more kernel
graphs than that raises ``RecompileLimitError`` naming the last reasons and what to do: a
recompile storm found in CI rather than in production.

A function is what ``torch.compile`` wrapped: its own frame and the frames dynamo resumes it in
after graph breaks count together. What is kept per function is bounded: the last
``HISTORY`` signatures per graph and the last ``REASONS`` explanations, for at most
``FUNCTIONS`` functions (the oldest forgotten first, ``recompile_functions_evictions``).
"""

from __future__ import annotations

import collections
import datetime
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from nkipy_core.cache.bounded import BoundedCache
from nkipy_core.cache.safety import make_private_dirs, open_private
from nkipy_core.config.settings import Config
from nkipy_core.errors import RecompileLimitError

log = logging.getLogger("nkipy.recompiles")

#: the file under a cache root that holds one line per compile
RECOMPILES_FILE = Path("stats") / "recompiles.jsonl"
#: signatures kept per graph to find the nearest one to a new signature
HISTORY = 32
#: explanations kept per function for ``RecompileLimitError``'s message
REASONS = 8
#: functions tracked at once
FUNCTIONS = 1024


@attrs.frozen
class TensorSpec:
    """What of a tensor argument a kernel graph is specialised on, as text (a symbolic size is
    its symbol, ``s0``: dynamo made that dimension dynamic)."""

    shape: tuple[str, ...]
    stride: tuple[str, ...]
    dtype: str
    device: str

    def __str__(self) -> str:
        return f"{self.dtype}[{'x'.join(self.shape)}] on {self.device}"


#: one argument of a graph: a tensor's ``TensorSpec``, or a number's value as text
Input = TensorSpec | str
#: a graph's arguments, each with its name: the graph's own (dynamo names them after the user's
#: variables, ``L_x_``) or its position (``input 0``)
Signature = tuple[tuple[str, Input], ...]


def signature(
    args: Sequence[Any], sizes: Sequence[Any] | None = None, names: Sequence[str] | None = None
) -> Signature:
    """The ``Input`` of each of ``args`` (tensors, fake or real, and numbers), named by ``names``
    if given (and as many), else by position; ``sizes``, a ``specialize.size_key``, gives the
    concrete shapes, strides and numbers instead of ``args``'."""

    def one(i: int, arg: Any) -> Input:
        given = None if sizes is None else sizes[i]
        if isinstance(arg, torch.Tensor):
            shape, stride = given if given is not None else (arg.shape, arg.stride())
            return TensorSpec(
                tuple(map(str, shape)),
                tuple(map(str, stride)),
                str(arg.dtype).removeprefix("torch."),
                str(arg.device),
            )
        return str(arg if given is None else given)

    if names is None or len(names) != len(args):
        names = [f"input {i}" for i in range(len(args))]
    return tuple((name, one(i, arg)) for i, (name, arg) in enumerate(zip(names, args)))


@attrs.frozen
class Reason:
    """One difference between a new signature and the nearest compiled one: ``what`` differs
    (``L_x_ dim 1``), its ``new`` and ``old`` values."""

    what: str
    new: str
    old: str

    def __str__(self) -> str:
        return f"{self.what}: {self.new} vs {self.old}"


def _shape(dims: tuple[str, ...]) -> str:
    return f"({', '.join(dims)})"


def _tensor_differences(name: str, new: TensorSpec, old: TensorSpec) -> list[Reason]:
    found = [
        Reason(f"{name} {field}", getattr(new, field), getattr(old, field))
        for field in ("dtype", "device")
        if getattr(new, field) != getattr(old, field)
    ]
    if len(new.shape) != len(old.shape):
        return [*found, Reason(f"{name} shape", _shape(new.shape), _shape(old.shape))]
    dims = [
        Reason(f"{name} dim {d}", a, b)
        for d, (a, b) in enumerate(zip(new.shape, old.shape))
        if a != b
    ]
    if not dims and new.stride != old.stride:  # a new shape changes the strides anyway
        dims = [Reason(f"{name} stride", _shape(new.stride), _shape(old.stride))]
    return found + dims


def differences(new: Signature, old: Signature) -> list[Reason]:
    """What differs between two signatures of one graph, input by input (matched by name).

    Numbers are named only when no tensor differs: a graph with symbolic sizes takes each size
    as a number too (``s0``), and that number changes with the tensor that has the size."""
    before = dict(old)
    tensors, numbers = [], []
    for name, value in new:
        was = before.pop(name, None)
        if value == was:
            continue
        if isinstance(value, TensorSpec) and isinstance(was, TensorSpec):
            tensors += _tensor_differences(name, value, was)
        else:
            numbers.append(Reason(name, str(value), "absent" if was is None else str(was)))
    numbers += [Reason(name, "absent", str(was)) for name, was in before.items()]
    return tensors or numbers


#: why dynamo compiled a graph again with the very inputs of an earlier one
SAME_INPUTS = Reason(
    "a guard on something other than the inputs (a global, a Python value, grad mode)",
    "failed",
    "held",
)


def nearest(new: Signature, previous: Sequence[Signature]) -> list[Reason]:
    """The differences between ``new`` and the one of ``previous`` it differs least from."""
    found = min((differences(new, old) for old in reversed(previous)), key=len)  # latest on ties
    return found or [SAME_INPUTS]


@attrs.define
class _Function:
    """What is kept of one compiled function: its compile count, the signatures compiled per
    graph, and its last explanations."""

    compiles: int = 0
    graphs: dict[str, collections.deque] = attrs.Factory(dict)
    explained: collections.deque = attrs.Factory(lambda: collections.deque(maxlen=REASONS))


_functions: BoundedCache[str, _Function] = BoundedCache("recompile_functions", FUNCTIONS)


def compiled(
    function: str,
    graph: str,
    inputs: Signature,
    config: Config,
    *,
    kind: str,
    counts: bool = True,
    fresh: bool = False,
) -> None:
    """Note that ``function`` compiles ``graph`` (a dynamo frame, or a graph with symbolic
    sizes) for the signature ``inputs``; ``kind`` says how (``"dynamo graph"``: dynamo called the
    backend; ``"size set"``: a new size set of a symbolic graph). Explained, logged, appended to
    the cache's ``recompiles.jsonl``, and checked against ``config.max_kernels`` (raises
    ``RecompileLimitError``) before the compile runs. ``counts=False``: a signature compiled as
    part of a compile already noted (a symbolic graph's first size set), only remembered.
    ``fresh``: dynamo compiles the function for the first time (in this process, or since
    ``torch.compiler.reset()``): what was noted of it before is forgotten."""
    state = _functions.get(function)
    if state is None or fresh:
        state = _functions[function] = _Function()
    history = state.graphs.setdefault(graph, collections.deque(maxlen=HISTORY))
    if not counts:
        history.append(inputs)
        return
    reasons = nearest(inputs, history) if history else []
    history.append(inputs)
    state.compiles += 1
    said = "; ".join(map(str, reasons)) or "first compile"
    state.explained.append(f"kernel graph {state.compiles} ({kind}: {graph}): {said}")
    log.info(
        "%s compiles kernel graph %d (%s: %s): %s", function, state.compiles, kind, graph, said
    )
    _append(config, function, graph, kind, state.compiles, reasons)
    limit = config.max_kernels
    if limit is not None and state.compiles > limit:
        raise RecompileLimitError(_limit_message(function, state, limit))


def _limit_message(function: str, state: _Function, limit: int) -> str:
    listed = "\n".join(f"  {line}" for line in state.explained)
    return (
        f"{function} needs more than max_kernels={limit} kernel graphs; the last compiles and "
        f"why:\n{listed}\nMark the changing dimension dynamic (torch._dynamo.mark_dynamic(x, dim) "
        "or torch.compile(..., dynamic=True)) so that one graph serves every size, pad inputs to a "
        "few sizes (nkipy_core.buckets), or raise the limit (max_kernels, NKIPY_MAX_KERNELS). "
        "`nkipy-ops explain` lists every compile recorded in the kernel cache."
    )


def _append(
    config: Config, function: str, graph: str, kind: str, number: int, reasons: list[Reason]
) -> None:
    """One JSON line per compile, appended in one write (``O_APPEND``): lines of processes
    sharing the cache interleave but never mix. A cache that cannot be written loses the line."""
    line = {
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "pid": os.getpid(),
        "rank": config.rank,
        "function": function,
        "graph": graph,
        "kind": kind,
        "compile": number,
        "reasons": [attrs.asdict(r) for r in reasons],
    }
    path = Path(config.nkipy_cache) / RECOMPILES_FILE
    try:
        make_private_dirs(path.parent)
        fd = open_private(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)
    except OSError as exc:  # a read-only or missing cache: the log line above still says it
        log.debug("nkipy: could not record the compile in %s: %s", path, exc)


def read(root: str | os.PathLike) -> list[dict[str, Any]]:
    """The compiles recorded under the cache ``root``, oldest first; lines that do not parse (a
    process killed mid-write) are skipped."""
    path = Path(root) / RECOMPILES_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records
