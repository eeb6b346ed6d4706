"""``torch.compile(..., options={"runtime": "nrt"})`` through the whole nrt runtime, with STAND-INS
for both Neuron pieces: neither the real neuronx-cc nor the real libnrt runs here.

The stand-in compiler checks the documented command line and writes a NEFF in the stand-in
libnrt's own text format (an f32 "add" of the inputs); the stand-in libnrt "executes" it on host
memory. What this proves is the glue of ``NrtRuntime``: availability from the probe, StableHLO
and HLO emitted and handed to the compiler, the artifacts cached, the NEFF loaded and bound, CPU
tensors staged through NRT tensors and back, and a warm cache starting no compiler. Whether the
real compiler accepts this HLO and the real runtime runs the NEFF is verified only on hardware.
"""

import os

import neuronx_cc_standin
import numpy as np
import pytest
import torch
from fresh_python import python
from nrt_standin_neff import neff

from nkipy_core import FallbackWarning, cache_stats, init_nkipy_backend
from nkipy_core.ir import DType
from nkipy_runtime.hlo_files import HLO_PROTO, HLO_TEXT, STABLEHLO
from nkipy_runtime.nrt import locate, probe
from nkipy_runtime.nrt_runtime import LOG, NEFF, NrtRuntime


@pytest.fixture
def neuron_machine(tmp_path, monkeypatch, standin_path):
    """A machine that looks like a Trainium host to the nrt runtime: a stand-in compiler, the
    stand-in libnrt, a fake /dev/neuron0 and a configured target."""
    compiler, calls = neuronx_cc_standin.install(tmp_path / "bin")
    devices = tmp_path / "dev"
    devices.mkdir()
    (devices / "neuron0").touch()
    image = tmp_path / "add.neff"
    f32 = DType.f32
    image.write_bytes(
        neff(
            "add",
            ("input", "input0", f32, (4, 8)),
            ("input", "input1", f32, (4, 8)),
            ("output", "output0", f32, (4, 8)),
        )
    )
    monkeypatch.setenv("NKIPY_NEURONX_CC", str(compiler))
    monkeypatch.setenv(locate.LIBRARY_ENV, standin_path)
    monkeypatch.setenv("STANDIN_NEFF", str(image))
    monkeypatch.setattr(probe, "DEVICE_DIR", str(devices))
    init_nkipy_backend(nkipy_cache=tmp_path / "cache", target="trn2")
    return calls


def test_nrt_is_available_only_with_compiler_library_and_devices(
    neuron_machine, monkeypatch, tmp_path
):
    assert NrtRuntime().available() == (True, "")
    monkeypatch.setattr(probe, "DEVICE_DIR", str(tmp_path / "nowhere"))
    ok, reason = NrtRuntime().available()
    assert not ok and "no Neuron devices" in reason


def test_a_compiled_graph_runs_through_the_compiler_and_libnrt_standins(neuron_machine, tmp_path):
    f = torch.compile(lambda a, b: a + b, backend="nkipy", options={"runtime": "nrt"})
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    torch.testing.assert_close(f(a, b), a + b, rtol=0, atol=0)
    (call,) = neuronx_cc_standin.calls(neuron_machine)
    assert call["argv"][4:6] == ["--target", "trn2"]
    (entry,) = (tmp_path / "cache" / "kernels").iterdir()
    for name in (STABLEHLO, HLO_PROTO, HLO_TEXT, NEFF, LOG):
        assert (entry / "artifacts" / name).stat().st_size > 0
    assert "add(" in (entry / "artifacts" / HLO_TEXT).read_text()
    assert "stand-in neuronx-cc: compiling" in (entry / "artifacts" / LOG).read_text()

    torch._dynamo.reset()  # a new compile of the same program: the cache has everything
    lowered = cache_stats["lowered_kernels"]
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    np.testing.assert_array_equal(f(x, y).numpy(), (x + y).numpy())
    assert len(neuronx_cc_standin.calls(neuron_machine)) == 1
    assert cache_stats["lowered_kernels"] == lowered


def test_an_op_the_target_cannot_take_runs_on_cpu_with_a_warning_naming_the_rule(neuron_machine):
    """No NeuronCore computes in f64: the planner asks the nrt runtime's profile about each op and
    keeps f64 ones on CPU (so no compiler runs for them) with a fallback warning that names the
    target, the rule and its source page."""
    f = torch.compile(lambda x: x.double().exp(), backend="nkipy", options={"runtime": "nrt"})
    x = torch.randn(4, 8)
    with pytest.warns(
        FallbackWarning, match=r"neuronx-cc for trn2 \(native int64\) does not take"
    ) as caught:
        out = f(x)
    torch.testing.assert_close(out, x.double().exp())
    assert "on f64" in str(caught[0].message) and "data-types.html" in str(caught[0].message)
    assert neuronx_cc_standin.calls(neuron_machine) == []


def test_f64_computed_in_f32_when_the_user_opts_in(neuron_machine, monkeypatch, tmp_path):
    """``NKIPY_NEURON_F64=f32``: the f64 graph compiles (to a module without f64) and runs on the
    stand-in device in f32, its inputs and outputs converted on the host, warned about once and
    counted as transfers."""
    monkeypatch.setenv("NKIPY_NEURON_F64", "f32")
    from nkipy_core.plugin import manager as plugins

    f = torch.compile(lambda a, b: a + b, backend="nkipy", options={"runtime": "nrt"})
    a, b = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64)
    with pytest.warns(FallbackWarning, match=r"compute f64 in f32 \(NKIPY_NEURON_F64=f32\)"):
        out = f(a, b)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, (a.float() + b.float()).double(), rtol=0, atol=0)
    (entry,) = (tmp_path / "cache" / "kernels").iterdir()
    hlo = (entry / "artifacts" / HLO_TEXT).read_text()
    assert "f32[4,8]{1,0} add(" in hlo and "f64" not in hlo
    (call,) = neuronx_cc_standin.calls(neuron_machine)
    assert call["argv"][8:] == ["--native-int64=enabled", "--implicit-integer-downcast=none"]
    stats = plugins.get().runtimes.get("nrt").stats
    assert stats.device_to_host >= 4  # two inputs and the output converted, the output read


CROWDED_HOST = """
import sys
import torch.distributed as dist
from nkipy_runtime.nrt import probe
probe.DEVICE_DIR = sys.argv[1]  # the stand-in machine's /dev
try:
    dist.init_process_group("nkipy", store=dist.HashStore(), rank=0, world_size=2)
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_more_local_ranks_than_cores_fail_in_init_process_group(
    neuron_machine, tmp_path, standin_path
):
    """torchrun with 2 local ranks on a host with 1 NeuronCore: the ``nkipy`` process group opens
    the device when it is made, so the error names the fix before any rank waits for a peer."""
    done = python(
        CROWDED_HOST,
        str(tmp_path / "dev"),
        NKIPY_RUNTIME="nrt",
        NRT_STANDIN_CORES="1",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="2",
        NEURON_RT_VISIBLE_CORES=None,
        NKIPY_NEURONX_CC=os.environ["NKIPY_NEURONX_CC"],
        **{locate.LIBRARY_ENV: standin_path},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "CoreMappingError 2 local ranks but only 1 visible NeuronCore(s)"
    ), done.stdout
    assert "torchrun --nproc-per-node" in done.stdout
