"""The ``random_bits`` primitive (Philox4x32-10), its u32/u64 types and the rng graph pass."""

import numpy as np
import pytest
import torch

from nkipy_core import VerificationError, knp
from nkipy_core.buffers import generator
from nkipy_core.compiler.rng import (
    KEY_SHAPE,
    RNG_KEY,
    RNG_KWARG,
    STREAM_BLOCKS,
    RandomStream,
    key_tensor,
    seed_random_ops,
    unseed_fallbacks,
)
from nkipy_core.ir import DType, KernelBuilder, TensorType, codegen, verify
from nkipy_core.ir.numpy_support import _philox4x32
from nkipy_core.ir.passes import simplify

STATE = TensorType((4,), DType.u32)
_LOW = 0xFFFFFFFF


def _state(key: int, counter: int) -> np.ndarray:
    """The u32[4] state of a 64-bit key and counter: low words first."""
    return np.array([key & _LOW, key >> 32, counter & _LOW, counter >> 32], dtype=np.uint32)


#: Random123's known-answer vectors for philox4x32-10 (kat_vectors): counter, key, result words
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize(("counter", "key", "expected"), KAT)
def test_philox_matches_the_random123_known_answers(counter, key, expected):
    words = _philox4x32(key, np.array(counter, dtype=np.uint32).reshape(4, 1))
    assert [int(w) for w in words[:, 0]] == list(expected)


def test_philox_is_vectorised_over_counters():
    counters = np.array([c for c, _, _ in KAT[:2]], dtype=np.uint32).T
    both = _philox4x32((0, 0), counters)
    assert [int(w) for w in both[:, 0]] == list(KAT[0][2])
    assert both.dtype == np.uint32 and both.shape == (4, 2)


def test_bits_are_philox_blocks_counting_from_the_state():
    """Value i is word i % 4 of block counter + i // 4, keyed by the state's two key words."""
    bits = knp.random_bits(np.array([0xA4093822, 0x299F31D0, 5, 0], dtype=np.uint32), (3, 3))
    assert bits.dtype == np.uint32 and bits.shape == (3, 3)
    blocks = np.array([[5, 6, 7], [0, 0, 0], [0, 0, 0], [0, 0, 0]], dtype=np.uint32)
    expected = _philox4x32((0xA4093822, 0x299F31D0), blocks).T.reshape(-1)[:9]
    np.testing.assert_array_equal(bits.reshape(-1), expected)


def test_state_part_advances_the_counter_past_the_bits_drawn():
    state = _state(123, 0)
    after = knp.random_state(state, (5,))  # 5 values use two blocks
    assert after.dtype == np.uint32
    np.testing.assert_array_equal(after, [123, 0, 2, 0])
    longer, rest = knp.random_bits(state, (12,)), knp.random_bits(after, (4,))
    np.testing.assert_array_equal(longer[8:], rest)  # the new state continues the stream
    assert not np.array_equal(longer[:4], rest)


def test_the_counter_carries_from_its_low_word_into_its_high_one():
    """Blocks past 2**32 - 1 count on in the high word, for the bits and the state."""
    state = _state(0x0123456789ABCDEF, 2**32 - 1)
    bits = knp.random_bits(state, (12,))
    np.testing.assert_array_equal(
        bits[4:], knp.random_bits(_state(0x0123456789ABCDEF, 2**32), (8,))
    )
    blocks = np.array([[_LOW, 0, 1], [0, 1, 1], [0, 0, 0], [0, 0, 0]], dtype=np.uint32)
    np.testing.assert_array_equal(bits, _philox4x32(state[:2], blocks).T.reshape(-1))
    np.testing.assert_array_equal(knp.random_state(state, (12,)), [*state[:2], 2, 1])


def test_the_counter_wraps_at_2_to_the_64():
    state = _state(9, 2**64 - 1)
    after = knp.random_state(state, (8,))
    np.testing.assert_array_equal(after, [9, 0, 1, 0])
    np.testing.assert_array_equal(
        knp.random_bits(state, (8,))[4:], knp.random_bits(_state(9, 0), (4,))
    )


def test_same_state_same_bits_other_key_other_bits():
    a = knp.random_bits(_state(1, 0), (64,))
    np.testing.assert_array_equal(a, knp.random_bits(_state(1, 0), (64,)))
    assert np.mean(a == knp.random_bits(_state(2, 0), (64,))) < 0.1
    assert np.mean(a == knp.random_bits(_state(1 << 32, 0), (64,))) < 0.1  # the high key word


def test_random_bits_is_typed():
    builder = KernelBuilder("k")
    for wrong in (TensorType((2,), DType.u64), TensorType((3,), DType.u32)):
        with pytest.raises(VerificationError, match="state must be u32\\[4\\]"):
            builder.emit("random_bits", [builder.param(wrong)], {"shape": (3,), "part": "bits"})
    with pytest.raises(VerificationError, match="part must be"):
        builder.emit("random_bits", [builder.param(STATE)], {"shape": (3,), "part": "other"})


def _random_kernel(draws):
    """A kernel of one u32[4] state parameter whose outputs are ``draws(state)``."""
    builder = KernelBuilder("k")
    state = builder.param(STATE)
    with builder.building("test"):
        outs = draws(state)
    kernel = simplify(builder.finish(outs))
    verify(kernel)
    return kernel


def test_kernel_py_draws_the_reference_bits_standalone():
    kernel = _random_kernel(lambda s: (knp.random_bits(s, (2, 3)), knp.random_state(s, (2, 3))))
    assert [str(t) for t in kernel.output_types] == ["u32[2x3]", "u32[4]"]
    state = _state(99, 7)
    bits, after = codegen.load(codegen.generate(kernel))(state)
    np.testing.assert_array_equal(bits, knp.random_bits(state, (2, 3)))
    np.testing.assert_array_equal(after, [99, 0, 9, 0])


def test_simplify_keeps_distinct_draws_and_merges_identical_ones():
    """A draw is a pure function of its state: CSE may merge equal draws but never draws from
    different counters, and no draw is folded while its state is a kernel input."""
    kernel = _random_kernel(
        lambda s: (
            knp.random_bits(s, (4,)),
            knp.random_bits(s, (4,)),
            knp.random_bits(knp.add(s, np.uint32(1)), (4,)),
        )
    )
    draws = [op for op in kernel.ops if op.prim == "random_bits"]
    assert len(draws) == 2
    assert kernel.outputs[0] == kernel.outputs[1] != kernel.outputs[2]


def test_unsigned_types_map_to_torch_and_numpy():
    for dtype, t, n in ((DType.u32, torch.uint32, np.uint32), (DType.u64, torch.uint64, np.uint64)):
        assert dtype.is_integer and not dtype.is_float
        assert DType.from_torch(t) is dtype and DType.from_numpy(n) is dtype
        assert dtype.torch is t and dtype.numpy == np.dtype(n)


def test_the_key_input_holds_key_and_counter_as_16_bit_halves():
    key = key_tensor(0x0123456789ABCDEF, 0xFEDCBA9876543210)
    assert key.dtype == torch.int32 and tuple(key.shape) == KEY_SHAPE
    assert bool((key >= 0).all()) and bool((key < 1 << 16).all())  # exact as u32 on any target
    state = RandomStream(key.numpy(), 0).state()
    assert state.dtype == np.uint32
    np.testing.assert_array_equal(state, _state(0x0123456789ABCDEF, 0xFEDCBA9876543210))


def test_stream_state_puts_each_stream_on_its_own_counter_range():
    key = key_tensor(5 | (2**31 - 1) << 32, 7).numpy()
    state = RandomStream(key, 3).state()
    np.testing.assert_array_equal(state, _state(5 | (2**31 - 1) << 32, 7 + 3 * STREAM_BLOCKS))
    np.testing.assert_array_equal(state[2:], [7, 3])  # the op's number, in the high word


def test_a_traced_key_gives_the_same_state():
    builder = KernelBuilder("k")
    key = builder.param(TensorType(KEY_SHAPE, DType.i32))
    with builder.building("test"):
        state = RandomStream(key, 2).state()
    kernel = simplify(builder.finish([state]))
    verify(kernel)
    host = key_tensor(2**64 - 1, 2**63 + 5).numpy()
    (traced,) = codegen.load(codegen.generate(kernel))(host)
    np.testing.assert_array_equal(traced, RandomStream(host, 2).state())


# -- the graph pass --------------------------------------------------------------------------------


def _graph():
    """``(rand(3) + x, randn(3) * x)`` as an ATen graph."""
    aten = torch.ops.aten
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    rand, randn = (
        graph.call_function(aten.rand.default, ([3],)),
        graph.call_function(aten.randn.default, ([3],)),
    )
    graph.output(
        (
            graph.call_function(aten.add.Tensor, (rand, x)),
            graph.call_function(aten.mul.Tensor, (randn, x)),
        )
    )
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_seed_pass_gives_one_key_and_a_stream_per_random_node():
    gm = _graph()
    seed_random_ops(gm, fallback_random=False)
    keys = [n for n in gm.graph.nodes if n.target is RNG_KEY]
    seeded = [n for n in gm.graph.nodes if RNG_KWARG in n.kwargs]
    assert len(keys) == 1
    assert keys[0].args == (2, torch.device("cpu"))  # two ops, drawn from the CPU generator
    assert [n.kwargs[RNG_KWARG] for n in seeded] == [(keys[0], 0), (keys[0], 1)]


def test_random_ops_on_each_device_share_that_devices_key():
    gm = _graph()
    random = (torch.ops.aten.rand.default, torch.ops.aten.randn.default)
    rand, randn = (n for n in gm.graph.nodes if n.target in random)
    rand.meta["val"] = torch.empty(3, device="nkipy")
    seed_random_ops(gm, fallback_random=False)
    keys = {n.args[1]: n for n in gm.graph.nodes if n.target is RNG_KEY}
    assert set(keys) == {torch.device("nkipy", 0), torch.device("cpu")}
    assert rand.kwargs[RNG_KWARG] == (keys[torch.device("nkipy", 0)], 0)
    assert randn.kwargs[RNG_KWARG] == (keys[torch.device("cpu")], 0)


def test_unlowered_random_nodes_get_their_arguments_back_and_run_as_torch():
    gm = _graph()
    seed_random_ops(gm, fallback_random=False)
    unseed_fallbacks(gm, lowered=set())
    assert not any(n.target is RNG_KEY or RNG_KWARG in n.kwargs for n in gm.graph.nodes)
    torch.manual_seed(0)
    a, _ = gm(torch.zeros(3))
    torch.manual_seed(0)
    np.testing.assert_array_equal(a.numpy(), torch.rand(3).numpy())


CPU = torch.device("cpu")


def test_the_key_op_draws_from_torchs_generator():
    torch.manual_seed(3)
    first, second = RNG_KEY(1, CPU), RNG_KEY(1, CPU)
    torch.manual_seed(3)
    assert torch.equal(RNG_KEY(1, CPU), first) and not torch.equal(first, second)


def test_the_cpu_key_is_one_draw_split_into_two_31_bit_words_and_counter_0():
    torch.manual_seed(3)
    draws = [int(torch.empty((), dtype=torch.int64).random_()) for _ in range(2)]
    torch.manual_seed(3)
    keys = [RNG_KEY(2, CPU), RNG_KEY(2, CPU)]
    assert all((k.dtype, tuple(k.shape)) == (torch.int32, KEY_SHAPE) for k in keys)
    # one draw of torch's generator per key, its low 62 bits as two 31-bit words
    assert [k.tolist() for k in keys] == [
        key_tensor(d & 0x7FFFFFFF | ((d >> 31) & 0x7FFFFFFF) << 32, 0).tolist() for d in draws
    ]


def test_the_device_key_is_its_generators_seed_and_offset_which_the_call_moves_on():
    torch.nkipy.manual_seed(11)
    device = torch.device("nkipy", 0)
    first = RNG_KEY(3, device)
    assert first.tolist() == key_tensor(11, 0).tolist()
    # three ops: three counter ranges of 4 * STREAM_BLOCKS values each
    assert generator.default(0).offset == 3 * 4 * STREAM_BLOCKS
    assert RNG_KEY(1, device).tolist() == key_tensor(11, 3 * STREAM_BLOCKS).tolist()
