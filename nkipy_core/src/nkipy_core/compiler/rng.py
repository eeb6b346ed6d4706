"""Random numbers in kernels: one Philox key and counter per call, one counter range per op.

Kernels stay pure functions: a random op is lowered over the ``random_bits`` primitive
(counter-based Philox4x32-10), whose bits depend only on a key and a counter. Key and counter
are not constants of the kernel (a cached kernel would then repeat its numbers forever) but an
input: ``seed_random_ops`` puts an ``nkipy::rng_key`` node at the top of every graph that has
random ops, and that host node draws them on each call (``draw``):

* for random ops that make ``nkipy`` tensors, from the device's generator
  (``nkipy_core.buffers.generator``): the key is its seed, the counter starts at its offset, and
  the call moves the offset past the values its ops may draw. ``torch.nkipy.set_rng_state`` of a
  saved state replays a call's numbers, and code that moves the offset as CUDA's (DTensor's RNG
  tracker) gets the values it moved to. Eager random ops on the device draw the same way, each
  its own call (``device/eager.py``), so a graph of one random op gives eager's numbers;
* for random ops on CPU tensors, from torch's default CPU generator: one draw is the key, the
  counter starts at 0.

Either way ``torch.manual_seed(s)`` reproduces a run, successive calls differ, and the same key
gives the same bits on every runtime. Each random node of a call gets its own range of
``STREAM_BLOCKS`` counters (``RandomStream.stream``), so two ``rand`` calls in one graph differ
too.

The numbers are not torch's (CPU torch uses a Mersenne twister). With the ``fallback_random``
option random ops instead run on the host as torch ops, drawing from torch's generator exactly
as eager does; inputs that only give them a shape are re-made on the host and ``native_dropout``
is split into a host mask and kernel arithmetic, so they do not split kernels.

The key reaches a rule through its FX node: the pass adds a reserved keyword argument
(``RNG_KWARG``) holding the key node and the stream number, which ``lowering.invoke`` turns into
``LoweringContext.rng``. Nodes that are not lowered get their plain arguments back
(``unseed_fallbacks``) and run as torch ops.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, cast

import attrs
import numpy as np
import torch
import torch.fx

from nkipy_core import _torch, knp
from nkipy_core.buffers import generator
from nkipy_core.buffers.device_contract import NAME
from nkipy_core.cache.kernel_cache import STATS
from nkipy_core.compiler.regions import run_on_cpu
from nkipy_core.ir.types import DType

log = logging.getLogger("nkipy.rng")

#: keyword argument of a seeded random node: ``(key node, stream number)``
RNG_KWARG = "nkipy_rng"
#: Philox blocks (of four 32-bit values) between the first counters of two random ops of a call:
#: 2**34 values per op, the most one draw may take (its block index is a u32 on the device).
#: 2**32, so an op's first counter is the call's with the op's number added to the high word.
STREAM_BLOCKS = 1 << 32
#: the key's bits in each of its two words when it is drawn from torch's CPU generator: 31, as
#: ever (numbers of CPU graphs do not change with the device's generator)
_KEY_WORD_BITS = 31
#: the key input of a kernel: int32[8], the 16-bit halves (low first) of the u32 words key low,
#: key high, counter low, counter high. Every half is a non-negative int32, which converts to u32
#: exactly on every target (Neuron has no 64-bit integer arithmetic, so no word passes through one).
KEY_SHAPE = (8,)


def key_tensor(key: int, counter: int) -> torch.Tensor:
    """The kernel input for a 64-bit Philox ``key`` and first block ``counter``."""
    words = (key & 0xFFFFFFFF, key >> 32 & 0xFFFFFFFF, counter & 0xFFFFFFFF, counter >> 32)
    return torch.tensor(
        [half for w in words for half in (w & 0xFFFF, w >> 16 & 0xFFFF)], dtype=torch.int32
    )


def draw(streams: int, device: torch.device) -> tuple[int, int]:
    """The Philox key and first block counter of one call whose ``streams`` random ops make
    tensors on ``device`` (see the module docstring); counted in ``cache_stats["random_keys"]``."""
    STATS["random_keys"] += 1
    if device.type == NAME:
        seed, offset = generator.default(device.index or 0).take(streams * STREAM_BLOCKS * 4)
        return seed, offset // 4
    value = int(torch.empty((), dtype=torch.int64).random_())  # one draw of torch's generator
    mask = (1 << _KEY_WORD_BITS) - 1
    return (value & mask) | ((value >> _KEY_WORD_BITS) & mask) << 32, 0


@torch.library.custom_op(
    "nkipy::rng_key", mutates_args=(), tags=(torch.Tag.nondeterministic_seeded,)
)
def _rng_key(streams: int, device: torch.device) -> torch.Tensor:
    """The key input of one call of a graph whose ``streams`` random ops make tensors on
    ``device`` (``draw``), one host step per call. Tagged as a seeded random op so that no
    torch pass deduplicates or recomputes it."""
    return key_tensor(*draw(streams, device))


@_rng_key.register_fake
def _(streams: int, device: torch.device) -> torch.Tensor:
    return torch.empty(KEY_SHAPE, dtype=torch.int32)


RNG_KEY = torch.ops.nkipy.rng_key.default


@attrs.frozen
class RandomStream:
    """What a rule needs to draw random bits: the call's key input (``KEY_SHAPE``, traced or
    NumPy) and the node's stream number, which puts its counters after every other node's."""

    key: Any
    stream: int

    def state(self):
        """The u32[4] ``random_bits`` state: the key words, then the low and high words of
        the stream's first counter (the call's, ``stream * STREAM_BLOCKS`` further on)."""
        halves: Any = knp.reshape(knp.astype(self.key, DType.u32), (4, 2))  # traced or NumPy
        words = knp.add(halves[:, 0], knp.multiply(halves[:, 1], np.array(1 << 16, np.uint32)))
        if not self.stream:
            return words
        return knp.add(words, np.array([0, 0, 0, self.stream], dtype=np.uint32))


def is_random(node: torch.fx.Node) -> bool:
    """A node whose op draws from torch's generator (ATen tags them ``nondeterministic_seeded``)
    with these arguments: dropout that drops nothing, like every fused attention of an inference
    graph (``dropout_p=0``), is deterministic, so it neither takes a key (which would advance
    torch's generator where eager does not) nor moves to the host under ``fallback_random``."""
    return (
        node.op == "call_function"
        and isinstance(node.target, _torch.OpOverload)
        and torch.Tag.nondeterministic_seeded in node.target.tags
        and node.target is not RNG_KEY
        and _draws(node)
    )


def _draws(node: torch.fx.Node) -> bool:
    if node.target is torch.ops.aten.native_dropout.default:
        return _dropping(node)
    for index, argument in enumerate(_torch.schema(node.target).arguments):
        if argument.name == "dropout_p":
            p = (
                node.args[index]
                if index < len(node.args)
                else node.kwargs.get("dropout_p", argument.default_value)
            )
            return isinstance(p, torch.fx.Node) or bool(p != 0)
    return True


def seed_random_ops(gm: torch.fx.GraphModule, fallback_random: bool) -> None:
    """Give the random nodes of ``gm`` a key input and a stream each (or, with
    ``fallback_random``, move them to the host); called by ``compile_graph`` before planning.
    The nodes that make tensors on one device share one key node, drawn from that device's
    generator (``draw``)."""
    nodes = [n for n in gm.graph.nodes if is_random(n)]
    if not nodes:
        return
    if fallback_random:
        _to_host(gm, nodes)
        return
    by_device: dict[torch.device, list[torch.fx.Node]] = {}
    for node in nodes:
        by_device.setdefault(_device(node), []).append(node)
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")
    for device, seeded in by_device.items():
        with gm.graph.inserting_before(first):
            key = gm.graph.call_function(RNG_KEY, (len(seeded), device))
        key.meta["val"] = torch.empty(KEY_SHAPE, dtype=torch.int32, device="meta")
        for stream, node in enumerate(seeded):
            node.kwargs = {**node.kwargs, RNG_KWARG: (key, stream)}
    STATS["seeded_random_ops"] += len(nodes)


def seed_eager_op(gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    """Give the random node of an eager op's one-node graph its key as the graph's last input,
    which the eager call draws (``draw(1, device)``) each time it runs the kernel."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    with gm.graph.inserting_before(node):
        key = gm.graph.placeholder("nkipy_rng_key")
    if placeholders:  # after the op's own inputs, so it is the kernel's last
        placeholders[-1].append(key)
    key.meta["val"] = torch.empty(KEY_SHAPE, dtype=torch.int32, device="meta")
    node.kwargs = {**node.kwargs, RNG_KWARG: (key, 0)}
    gm.recompile()


def _device(node: torch.fx.Node) -> torch.device:
    """Where a random node's (first) result lives, by its example value; CPU without one."""
    val = node.meta.get("val")
    first = val[0] if isinstance(val, (tuple, list)) else val
    return torch.device(first.device) if isinstance(first, torch.Tensor) else torch.device("cpu")


def unseed_fallbacks(gm: torch.fx.GraphModule, lowered: set[str]) -> None:
    """Random nodes not in ``lowered`` (node names) get their plain arguments back and run as
    torch ops; the key node goes if nothing uses it any more."""
    keys = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is RNG_KEY]
    if not keys:
        return
    for node in gm.graph.nodes:
        if RNG_KWARG in node.kwargs and node.name not in lowered:
            node.kwargs = {k: v for k, v in node.kwargs.items() if k != RNG_KWARG}
    for key in keys:
        if not key.users:
            gm.graph.erase_node(key)
    gm.recompile()


def split_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], RandomStream | None]:
    """A node's keyword arguments without the reserved one, and the stream it held."""
    if RNG_KWARG not in kwargs:
        return kwargs, None
    key, stream = kwargs[RNG_KWARG]
    return {k: v for k, v in kwargs.items() if k != RNG_KWARG}, RandomStream(key, stream)


# -- fallback_random: torch's own generator, on the host ---------------------------------------

#: random ops whose ``self`` gives only a shape, dtype and device: functional forms of in-place
#: fills (``x.uniform_()`` is ``uniform(x)`` after functionalization) and the ``*_like`` ops
_SHAPE_ONLY_SELF = frozenset(
    {
        "aten::uniform",
        "aten::normal_functional",
        "aten::random",
        "aten::exponential",
        "aten::cauchy",
        "aten::log_normal",
        "aten::geometric",
    }
)
_SHAPE_ONLY_SELF_OVERLOADS = frozenset({"aten::bernoulli.p", "aten::bernoulli.Tensor"})


def _shape_only_self(op: _torch.OpOverload) -> bool:
    packet = op.name().split(".")[0]
    return (
        packet in _SHAPE_ONLY_SELF
        or packet.endswith("_like")
        or op.name() in _SHAPE_ONLY_SELF_OVERLOADS
    )


def _host(graph: torch.fx.Graph, op, args: tuple, kwargs: dict, val: Any) -> torch.fx.Node:
    """A node running ``op`` as a torch op on the host (as in an ``on_cpu`` region)."""
    node = graph.call_function(run_on_cpu, (op, *args), kwargs)
    node.meta["val"] = val
    return node


def _host_empty(graph: torch.fx.Graph, like: torch.fx.Node) -> torch.fx.Node:
    val = like.meta["val"]
    kwargs = {"dtype": val.dtype, "device": val.device}
    return _host(graph, torch.ops.aten.empty.memory_format, (list(val.shape),), kwargs, val)


def _to_host(gm: torch.fx.GraphModule, nodes: Sequence[torch.fx.Node]) -> None:
    """Run each random node on the host with torch's generator, in graph order (the order eager
    draws in). Shape-only inputs become host ``empty`` tensors, so the random node depends on no
    kernel and kernels are not split; ``native_dropout`` draws its mask on the host
    (``bernoulli_(1 - p)`` of an empty tensor, as torch's CPU kernel does) and multiplies in the
    graph."""
    graph = gm.graph
    for node in nodes:
        with graph.inserting_before(node):
            if node.target is torch.ops.aten.native_dropout.default:
                _split_dropout(graph, node)
                continue
            args = list(node.args)
            # fx types a target loosely: random nodes call OpOverloads
            if _shape_only_self(node.target) and isinstance(args[0], torch.fx.Node):  # type: ignore[arg-type]
                args[0] = _host_empty(graph, args[0])
            host = _host(graph, node.target, tuple(args), dict(node.kwargs), node.meta.get("val"))
        node.replace_all_uses_with(host)
        graph.erase_node(node)
    STATS["host_random_ops"] += len(nodes)
    log.info("fallback_random: %d random op(s) draw from torch's generator on the host", len(nodes))
    gm.recompile()


def _dropping(node: torch.fx.Node) -> bool:
    """Whether a ``native_dropout`` node draws at all (not in evaluation, not with ``p = 0``)."""
    _, p, train = node.args[:3]
    return bool(train) and bool(p != 0)


def _split_dropout(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """A host Bernoulli draw and kernel arithmetic in eager ``F.dropout``'s order on CPU:
    ``noise.div_(1 - p)`` rounds the kept value ``1/(1-p)`` to the tensor's dtype, then
    ``x * noise`` (``p = 1`` multiplies by the all-zero noise)."""
    aten = torch.ops.aten
    x, p = cast(tuple[torch.fx.Node, float], node.args[:2])  # native_dropout(input, p, train)
    out_val, mask_val = node.meta["val"]
    noise = _host(graph, aten.bernoulli.p, (_host_empty(graph, x), 1 - p), {}, out_val)
    if p != 1:
        noise = graph.call_function(aten.div.Tensor, (noise, 1 - p))
        noise.meta["val"] = out_val
    out = graph.call_function(aten.mul.Tensor, (x, noise))
    out.meta["val"] = out_val
    mask = graph.call_function(aten.ne.Scalar, (noise, 0))
    mask.meta["val"] = mask_val
    for user in list(node.users):  # AOTAutograd graphs only index native_dropout's results
        user.replace_all_uses_with(out if user.args[1] == 0 else mask)
        graph.erase_node(user)
    graph.erase_node(node)
