"""The ``custom_call`` emitter: the HLO neuronx-cc reads holds the custom call to the op's target
with its backend config, byte for byte. Checked by converting the StableHLO to an HloModuleProto
with jaxlib; no compiler here knows the target, so nothing runs it."""

from __future__ import annotations

import numpy as np
import pytest

from nkipy_core import knp
from nkipy_core.ir import DType, KernelBuilder, TensorType

pytest.importorskip(
    "jax", reason="the HLO conversion needs the nkipy-runtime[xla] extra (jax, jaxlib)"
)

from nkipy_runtime import xla_bridge  # noqa: E402
from nkipy_runtime.stablehlo import emit_module  # noqa: E402


def test_the_hlo_holds_the_custom_call_with_its_target_and_config():
    config = 'eyJzb3VyY2UiOiAiZGVmIGsoKTpcbiAgICBwYXNzIn0= "quoted" \\ end'
    b = KernelBuilder("k")
    x, y = b.param(TensorType((4, 8), DType.f32)), b.param(TensorType((8,), DType.bf16))
    with b.building("test"):
        out = knp.custom_call(
            [x, y],
            target="AwsNeuronCustomNativeKernel",
            config=config,
            host="custom_call_hosts:scaled_add",
            shape=(4, 8),
            dtype=np.float32,
        )
        out = out * 2
    module = xla_bridge.to_hlo(emit_module(b.finish([out])))
    line = next(ln for ln in module.text.splitlines() if "custom-call(" in ln)
    assert 'custom_call_target="AwsNeuronCustomNativeKernel"' in line
    assert "f32[4,8]{1,0} custom-call(%Arg_0.1, %Arg_1.1)" in line
    assert config.encode() in module.proto
    assert "custom_call_hosts" not in module.text  # the host function is the cpu runtime's
