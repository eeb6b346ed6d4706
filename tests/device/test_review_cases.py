"""What a demanding user does next: module state updated in place, fills of integer tensors,
random ops and initialisers, copies, pickling, graph breaks and checkpointing on the device."""

import copy
import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint as checkpoint

from nkipy_core import FallbackWarning, init_nkipy_backend


def test_batch_norm_training_updates_running_stats_like_cpu():
    torch.manual_seed(0)
    cpu, dev = torch.nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4).to("nkipy")
    x = torch.randn(6, 4)
    for _ in range(2):
        out, expected = dev(x.to("nkipy")), cpu(x)
    torch.testing.assert_close(out.cpu(), expected)
    torch.testing.assert_close(dev.running_mean.cpu(), cpu.running_mean)
    torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var)
    assert dev.num_batches_tracked.item() == 2


@pytest.mark.parametrize(
    "make",
    [
        lambda d: torch.ones(3, dtype=torch.long, device=d),
        lambda d: torch.full((2,), 2.0, dtype=torch.int64, device=d),
        lambda d: torch.zeros(3, dtype=torch.int32, device=d).fill_(-3.0),
        lambda d: torch.arange(4.0, device=d),
        lambda d: torch.arange(0.5, 3.0, 0.5, device=d),
        lambda d: F.pad(torch.tensor([True, False], device=d), (1, 1), value=0.0),
        lambda d: torch.addmm(
            torch.full((2, 2), float("nan"), device=d),
            torch.eye(2, 3, device=d),
            torch.ones(3, 2, device=d),
            beta=0.0,
        ),
    ],
)
def test_float_arguments_that_are_not_plain_values_are_respected(make):
    torch.testing.assert_close(make("nkipy").cpu(), make("cpu"))


RANDOM_MAKERS = {
    "bernoulli_": lambda d: torch.ones(4, device=d).bernoulli_(
        0.5
    ),  # p=0.5: the default the dispatcher drops
    "randint": lambda d: torch.randint(0, 10, (5,), device=d),
    "uniform_": lambda d: torch.empty(3, device=d).uniform_(-1, 1),
    "Linear": lambda d: torch.nn.Linear(3, 2, device=d).weight,
    "dropout": lambda d: F.dropout(torch.ones(8, device=d), 0.5, training=True),
}


@pytest.mark.parametrize("name", RANDOM_MAKERS)
def test_random_ops_and_initialisers_run_on_the_device_without_warnings_even_strict(name):
    """They run their pack's kernels, drawing from the device's generator: seeded, they repeat,
    and their values are the distribution's."""
    init_nkipy_backend(strict=True)
    make = RANDOM_MAKERS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        torch.manual_seed(7)
        got = make("nkipy").detach().cpu()
        torch.manual_seed(7)
        assert torch.equal(make("nkipy").detach().cpu(), got)
    expected = make("cpu").detach()
    assert got.shape == expected.shape and got.dtype == expected.dtype
    low, high = {
        "bernoulli_": (0, 1),
        "randint": (0, 9),
        "uniform_": (-1, 1),
        "dropout": (0, 2),
    }.get(
        name,
        (-(3**-0.5), 3**-0.5),  # Linear(3, 2): kaiming-uniform within 1/sqrt(fan_in)
    )
    assert bool((got >= low).all()) and bool((got <= high).all()), got


@pytest.mark.parametrize("name", RANDOM_MAKERS)
def test_with_fallback_random_they_draw_torchs_cpu_numbers(name):
    init_nkipy_backend(strict=True, fallback_random=True)
    make = RANDOM_MAKERS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        torch.manual_seed(7)
        got = make("nkipy")
    torch.manual_seed(7)
    torch.testing.assert_close(got.detach().cpu(), make("cpu").detach())


def test_deepcopy_and_pickle_of_device_tensors_and_modules():
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3)).to("nkipy")
    clone = copy.deepcopy(model)
    for (name, a), b in zip(model.state_dict().items(), clone.state_dict().values()):
        assert b.device.type == "nkipy" and torch.equal(a.cpu(), b.cpu()), name
        if a.numel():
            assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    t = torch.arange(4.0).to("nkipy")
    restored = pickle.loads(pickle.dumps(t))
    assert restored.device.type == "nkipy" and torch.equal(restored.cpu(), t.cpu())


def test_graph_breaks_on_device_values_inside_compiled_functions():
    branch = torch.compile(lambda x: x * 2 if x.sum() > 0 else x * 3, backend="nkipy")
    assert torch.equal(branch(torch.ones(3, device="nkipy")).cpu(), torch.full((3,), 2.0))
    assert torch.equal(branch(-torch.ones(3, device="nkipy")).cpu(), torch.full((3,), -3.0))
    listed = torch.compile(lambda x: (x * 2).tolist(), backend="nkipy")
    assert listed(torch.ones(2, device="nkipy")) == [2.0, 2.0]


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_on_the_device(reentrant):
    x = torch.randn(5, requires_grad=True)
    xd = x.detach().to("nkipy").requires_grad_(True)
    checkpoint.checkpoint(torch.sin, xd, use_reentrant=reentrant).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), torch.cos(x.detach()))


def test_set_device_without_an_index_keeps_the_current_one():
    torch.nkipy.set_device("nkipy")
    assert torch.nkipy.current_device() == 0
    assert torch.ones(1).nkipy().device == torch.device("nkipy", 0)


@pytest.mark.parametrize("device", ["cpu", "nkipy"])
def test_outputs_of_one_compiled_call_never_alias_each_other(device):
    a, b = torch.compile(lambda x: (x + 1, x + 1), backend="nkipy")(torch.zeros(2, device=device))
    a.mul_(10)
    assert torch.equal(b.cpu(), torch.ones(2))


def test_optimizer_state_dict_round_trip(tmp_path):
    model = torch.nn.Linear(3, 2).to("nkipy")
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(4, 3, device="nkipy")).sum().backward()
    optimizer.step()
    torch.save(optimizer.state_dict(), tmp_path / "opt.pt")
    state = torch.load(tmp_path / "opt.pt")
    restored = torch.optim.AdamW(model.parameters(), lr=0.1)
    restored.load_state_dict(state)
    exp_avg = restored.state_dict()["state"][0]["exp_avg"]
    assert exp_avg.device.type == "nkipy"
    torch.testing.assert_close(exp_avg.cpu(), optimizer.state_dict()["state"][0]["exp_avg"].cpu())


@pytest.mark.parametrize(
    "cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN], ids=lambda c: c.__name__
)
@pytest.mark.parametrize("bias", [True, False])
def test_recurrent_layers_match_cpu_with_gradients(cls, bias):
    torch.manual_seed(0)
    cpu = cls(4, 6, num_layers=2, batch_first=True, bias=bias)
    dev = copy.deepcopy(cpu).to("nkipy")
    x = torch.randn(3, 5, 4, requires_grad=True)
    xd = x.detach().to("nkipy").requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        out_d, _ = dev(xd)
        out_d.square().sum().backward()
    out, _ = cpu(x)
    out.square().sum().backward()
    torch.testing.assert_close(out_d.detach().cpu(), out.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)


def test_autocast_follows_the_cuda_policy_in_bfloat16():
    torch.manual_seed(0)
    linear = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    device_linear = copy.deepcopy(linear).to("nkipy")
    with torch.autocast("nkipy"):  # bf16 by default on this device
        y = device_linear(x.to("nkipy"))
        probabilities = torch.softmax(y, -1)
        loss = F.mse_loss(y, torch.zeros(2, 3, device="nkipy"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = linear(x)
    assert (
        y.dtype == torch.bfloat16
        and probabilities.dtype == torch.float32
        and loss.dtype == torch.float32
    )
    torch.testing.assert_close(y.cpu(), expected)
    loss.backward()
    assert device_linear.weight.grad.dtype == torch.float32
    with torch.autocast("nkipy", dtype=torch.float16):
        assert device_linear(x.to("nkipy")).dtype == torch.float16
    assert device_linear(x.to("nkipy")).dtype == torch.float32  # outside: untouched
