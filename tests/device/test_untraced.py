"""Installing nkipy-core changes nothing for programs compiled with torch's own backends.

Torch calls the device module from code that dynamo compiles (RNG state save/restore,
``torch.accelerator``); dynamo must call it untraced, as it calls ``torch.cuda``. Each program runs
eagerly and under ``torch.compile(backend="eager" / "inductor")`` in fresh interpreters without
the device (``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), with it, and with the ``cpu`` runtime opted in
as the accelerator; every result (values or exception) must be the same.
"""

import json

import pytest
from fresh_python import python

PROGRAMS = """
import json, sys, torch
from torch.testing._utils import freeze_rng_state


def freeze_rng(x):  # what OpInfo's randn sample wrapper does
    with freeze_rng_state():
        noise = torch.randn_like(x)
    return x + noise + torch.randn_like(x)


def fork_rng(x):
    with torch.random.fork_rng():
        noise = torch.randn_like(x)
    return x * noise - torch.randn_like(x)


def get_set_rng_state(x):
    state = torch.get_rng_state()
    a = torch.rand_like(x)
    torch.set_rng_state(state)
    return a - torch.rand_like(x) + x


def tutorial_device_pick(x):
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else "cpu"
    return torch.relu(torch.nn.functional.linear(x.to(device), torch.ones(3, 3, device=device))).cpu()


def accelerator_queries(x):
    count = torch.accelerator.device_count()
    return x * (count + 1) + torch.accelerator.is_available()


def run(fn, backend):
    torch.manual_seed(0)
    torch._dynamo.reset()
    try:
        f = fn if backend == "none" else torch.compile(fn, backend=backend)
        return [round(v, 5) for v in f(torch.arange(3.0)).tolist()]
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]


programs = [freeze_rng, fork_rng, get_set_rng_state, tutorial_device_pick, accelerator_queries]
results = {p.__name__: {b: run(p, b) for b in sys.argv[1:]} for p in programs}
print(json.dumps(results))
"""


def results(backends, **env):
    out = python(PROGRAMS, *backends, timeout=600, **env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def without_nkipy():
    return results(
        ["none", "eager", "inductor"], TORCH_DEVICE_BACKEND_AUTOLOAD="0", NKIPY_RUNTIME=None
    )


def test_programs_run_the_same_with_and_without_nkipy(without_nkipy):
    for name, by_backend in without_nkipy.items():  # the reference itself: compiled == eager
        assert by_backend["eager"] == by_backend["inductor"] == by_backend["none"], name
        assert isinstance(by_backend["none"], list), (name, by_backend["none"])
    assert results(["none", "eager", "inductor"], NKIPY_RUNTIME=None) == without_nkipy


def test_rng_programs_compile_untraced_with_the_device_opted_in(without_nkipy):
    """Opted in, torch's RNG helpers save and restore the device's state too: through our module,
    which dynamo must not trace (it used to fail in ``set_rng_state`` under ``no_dispatch()``)."""
    opted_in = results(["none", "eager"], NKIPY_RUNTIME="cpu")
    for name in ("freeze_rng", "fork_rng", "get_set_rng_state"):
        assert opted_in[name] == {b: without_nkipy[name][b] for b in ("none", "eager")}, name
