"""The ``custom_call`` primitive: a kernel from elsewhere inside an NKIPy kernel.

The cpu runtime runs it through its ``host`` function; the IR shows its config as a digest; it
never folds; CSE merges equal calls only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nkipy_core import knp
from nkipy_core.errors import VerificationError
from nkipy_core.ir import DType, KernelBuilder, TensorType, codegen
from nkipy_core.ir.passes import simplify
from nkipy_core.ir.printer import format_kernel

HOST = "custom_call_hosts:scaled_add"
T = TensorType((4, 8), DType.f32)


def _call(operands, config="2.0", host=HOST, shape=(4, 8), dtype=np.float32):
    return knp.custom_call(
        operands, target="TestTarget", config=config, host=host, shape=shape, dtype=dtype
    )


def _kernel(body, n_params=2):
    b = KernelBuilder("k")
    params = [b.param(T) for _ in range(n_params)]
    with b.building("test"):
        outs = body(*params)
    return b.finish(outs if isinstance(outs, tuple) else (outs,))


def test_the_cpu_runtime_runs_a_custom_call_through_its_host_function():
    kernel = _kernel(lambda a, b: _call([a, b]) * 3)
    a, b = np.arange(32, dtype=np.float32).reshape(4, 8), np.ones((4, 8), np.float32)
    (out,) = codegen.load(codegen.generate(kernel))(a, b)
    np.testing.assert_array_equal(out, (a + 2 * b) * 3)


def test_the_ir_prints_the_config_as_its_digest_and_keys_change_with_it():
    long_config = "x" * 5000
    text = format_kernel(_kernel(lambda a, b: _call([a, b], config=long_config)))
    assert "x" * 100 not in text and "<5000 chars sha256:" in text
    other = format_kernel(_kernel(lambda a, b: _call([a, b], config=long_config + "y")))
    assert other != text


def test_cse_merges_equal_calls_and_keeps_different_configs():
    same = simplify(_kernel(lambda a, b: (_call([a, b]), _call([a, b]))))
    assert [op.prim for op in same.ops].count("custom_call") == 1
    different = simplify(_kernel(lambda a, b: (_call([a, b]), _call([a, b], config="3.0"))))
    assert [op.prim for op in different.ops].count("custom_call") == 2


def test_a_custom_call_on_constants_is_not_folded():
    kernel = simplify(
        _kernel(lambda a: _call([np.ones((4, 8), np.float32), np.ones((4, 8), np.float32)]) + a, 1)
    )
    assert "custom_call" in [op.prim for op in kernel.ops]


def test_numpy_mode_evaluates_through_the_host_function():
    a = np.ones((4, 8), np.float32)
    np.testing.assert_array_equal(_call([a, a], config="0.5"), np.full((4, 8), 1.5, np.float32))


def test_a_host_function_returning_the_wrong_type_is_an_error():
    kernel = _kernel(lambda a: _call([a], host="custom_call_hosts:wrong_shape"), 1)
    with pytest.raises(
        RuntimeError, match=r"returned float32\[32\], but its kernel declares float32\[4, 8\]"
    ):
        codegen.load(codegen.generate(kernel))(np.ones((4, 8), np.float32))


@pytest.mark.parametrize("host", ["no_colon", ":f", "m:"])
def test_a_malformed_host_is_ill_typed(host):
    with pytest.raises(VerificationError, match="host must be 'module:function'"):
        _kernel(lambda a: _call([a], host=host), 1)


def test_the_primitive_reference_is_generated_from_the_table_as_it_is():
    root = Path(__file__).parents[2]
    result = subprocess.run(
        [sys.executable, str(root / "docs" / "gen_primitives.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
