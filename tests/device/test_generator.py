"""The ``nkipy`` device's generator (``nkipy_core.buffers.generator``, ``device.random``): a
Philox seed and offset laid out as CUDA's, which the device's kernels, eager and compiled, draw
from; saving and restoring it replays them, and DTensor's RNG tracker moves it as on CUDA."""

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint as checkpoint

import nkipy_core
from nkipy_core import DeviceError
from nkipy_core.compiler.rng import STREAM_BLOCKS

nkipy = torch.nkipy
#: how far one random op moves the offset: its counter range, in 32-bit values
PER_OP = 4 * STREAM_BLOCKS


def seed_and_offset(state: torch.Tensor) -> tuple[int, int]:
    """What DTensor's ``_PhiloxState`` reads from a CUDA-like state."""
    return int(state[:8].view(torch.uint64)), int(state[8:].view(torch.int64))


def test_the_state_is_16_bytes_seed_then_offset():
    nkipy.manual_seed(1234)
    state = nkipy.get_rng_state()
    assert state.dtype == torch.uint8 and state.shape == (16,) and state.device.type == "cpu"
    assert seed_and_offset(state) == (1234, 0)
    assert nkipy.initial_seed() == 1234


def test_torch_manual_seed_and_seed_reach_the_device():
    torch.manual_seed(77)
    assert seed_and_offset(nkipy.get_rng_state()) == (77, 0)
    seeded = torch.seed()
    assert nkipy.initial_seed() == seeded
    torch.manual_seed(-1)  # torch remaps negative seeds to 0xffff_ffff_ffff_ffff + seed
    assert nkipy.initial_seed() == 2**64 - 2
    nkipy.seed()
    assert nkipy.initial_seed() != 2**64 - 2


def test_eager_random_ops_draw_from_it_and_move_the_offset_on():
    torch.manual_seed(0)
    a = torch.rand(5, device="nkipy")
    assert seed_and_offset(nkipy.get_rng_state()) == (0, PER_OP)
    b = torch.rand(5, device="nkipy")
    assert not torch.equal(a.cpu(), b.cpu())
    torch.manual_seed(0)
    assert torch.equal(torch.rand(5, device="nkipy").cpu(), a.cpu())


def test_normal__draws_from_it_not_from_torchs_cpu_generator():
    """``normal_`` (``nn.init.normal_``, ``trunc_normal_``) runs ``normal_functional`` on the
    device. DTensor's tracker wraps each random op in ``fork_rng``, which restores the CPU
    generator: drawn from it, every draw of ``trunc_normal_``'s rejection loop would be the same
    and the loop would never end."""
    torch.manual_seed(0)
    draws = []
    for _ in range(2):
        with torch.random.fork_rng(devices=[]):  # restores torch's CPU generator only
            draws.append(torch.empty(64, device="nkipy").normal_(0, 1).cpu())
    assert seed_and_offset(nkipy.get_rng_state()) == (0, 2 * PER_OP)
    assert not torch.equal(draws[0], draws[1])
    with torch.random.fork_rng(devices=[]):
        cut = torch.nn.init.trunc_normal_(torch.empty(256, device="nkipy"), std=1.0, a=-1, b=1)
    assert cut.abs().max() <= 1


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(3, 4, device="nkipy"),
        lambda: torch.empty(6, device="nkipy").uniform_(-2, 2),
        lambda: torch.empty(6, device="nkipy").normal_(1, 2),
        lambda: F.dropout(torch.ones(16, device="nkipy"), 0.5, training=True),
        lambda: torch.nn.Linear(4, 3, device="nkipy").weight.detach(),
    ],
    ids=["randn", "uniform_", "normal_", "dropout", "Linear"],
)
def test_setting_a_saved_state_replays_the_devices_numbers(make):
    make()
    saved = nkipy.get_rng_state()
    first, second = make().cpu(), make().cpu()
    nkipy.set_rng_state(saved)
    assert torch.equal(make().cpu(), first) and torch.equal(make().cpu(), second)


def test_compiled_graphs_draw_from_it_too():
    fn = torch.compile(lambda x: x + torch.rand(4, device=x.device), backend="nkipy")
    x = torch.zeros(4, device="nkipy")
    torch.manual_seed(3)
    eager = torch.rand(4, device="nkipy").cpu()
    torch.manual_seed(3)
    compiled = fn(x).cpu()
    assert torch.equal(compiled, eager)  # one random op: the eager op's numbers
    assert seed_and_offset(nkipy.get_rng_state())[1] == PER_OP
    saved = nkipy.get_rng_state()
    again = fn(x).cpu()
    assert not torch.equal(again, compiled)
    nkipy.set_rng_state(saved)
    assert torch.equal(fn(x).cpu(), again)


def test_a_graph_moves_the_offset_past_each_of_its_random_ops():
    fn = torch.compile(
        lambda x: (x + torch.rand(4, device=x.device), torch.randn(4, device=x.device)),
        backend="nkipy",
    )
    torch.manual_seed(3)
    a, b = fn(torch.zeros(4, device="nkipy"))
    assert seed_and_offset(nkipy.get_rng_state()) == (3, 2 * PER_OP)
    torch.manual_seed(3)
    assert torch.equal(torch.rand(4, device="nkipy").cpu(), a.cpu())


def test_fork_rng_restores_the_devices_state():
    """``fork_rng`` saves the state of each of ``device_count()`` devices: one once the program
    asked for the device (the suites only register it, as no program would)."""
    nkipy_core.register_device()
    torch.manual_seed(5)
    with torch.random.fork_rng(device_type="nkipy"):
        inside = torch.rand(4, device="nkipy").cpu()
    assert torch.equal(torch.rand(4, device="nkipy").cpu(), inside)


def test_an_offset_moved_as_dtensor_moves_it_draws_that_part_of_the_stream():
    """DTensor's ``OffsetBasedRNGTracker`` gives a shard at element ``k`` the offset ``base + k``:
    the shard draws the full tensor's values from ``k`` on (for ops of one value per element)."""
    torch.manual_seed(9)
    state = nkipy.get_rng_state()
    full = torch.rand(16, device="nkipy").cpu()
    state[8:] = (state[8:].view(torch.int64) + 8).view(torch.uint8)  # `_PhiloxState.offset = `
    nkipy.set_rng_state(state)
    assert torch.equal(torch.rand(8, device="nkipy").cpu(), full[8:])


def test_activation_checkpointing_replays_dropout_in_the_recomputation():
    """Checkpointing saves the device's state before the forward and restores it for the
    recomputation, so the backward sees the forward's dropout mask."""
    x = torch.randn(32).to("nkipy").requires_grad_(True)

    def block(t):
        return F.dropout(t * 2, 0.5, training=True)

    torch.manual_seed(0)
    checkpoint.checkpoint(block, x, use_reentrant=False).sum().backward()
    recomputed = x.grad.cpu()
    x.grad = None
    torch.manual_seed(0)
    block(x).sum().backward()
    assert torch.equal(recomputed, x.grad.cpu())


def test_a_state_of_another_layout_is_a_typed_error():
    with pytest.raises(DeviceError, match="uint8 tensor of 16 bytes"):
        nkipy.set_rng_state(torch.get_rng_state())  # the CPU generator's 5056 bytes
    bad = nkipy.get_rng_state()
    bad[8] = 3
    with pytest.raises(DeviceError, match="not a multiple of 4"):
        nkipy.set_rng_state(bad)
    with pytest.raises(DeviceError, match="cpu is not an nkipy device"):
        nkipy.get_rng_state("cpu")
