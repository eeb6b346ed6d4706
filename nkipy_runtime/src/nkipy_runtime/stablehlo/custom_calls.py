"""Emitter of the ``custom_call`` primitive: ``stablehlo.custom_call`` to the op's target.

The op's ``target`` and ``config`` become ``call_target_name`` and ``backend_config`` unchanged: for
an NKI kernel that is ``AwsNeuronCustomNativeKernel`` with the kernel the NKI pack serialised, which
``neuronx-cc`` replaces with the compiled kernel while it optimises the rest of the module. The
``host`` function is the cpu runtime's and has no place in HLO.
"""

from __future__ import annotations

import json

from nkipy_core.ir import DType, Opaque, TensorType

from .builder import FunctionBuilder, Val
from .registry import emits


@emits("custom_call")
def _custom_call(
    b: FunctionBuilder,
    result: TensorType,
    *operands: Val,
    target: str,
    config: Opaque,
    host: str,
    shape: tuple,
    dtype: DType,
) -> Val:
    # json.dumps quotes and escapes a string the way MLIR string attributes read it
    return b.op(
        "stablehlo.custom_call",
        list(operands),
        result,
        {
            "call_target_name": json.dumps(target),
            "backend_config": json.dumps(config.text),
            "has_side_effect": "false",
        },
    )
