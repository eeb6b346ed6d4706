"""Run an NKIPy kernel through the StableHLO emitter on XLA and compare with its NumPy reference.

The reference is the kernel's generated NumPy code, which is exactly what the ``cpu`` runtime
executes; so agreement here is agreement between the ``xla`` and ``cpu`` runtimes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nkipy_core.ir import Kernel, codegen
from nkipy_runtime import xla_bridge
from nkipy_runtime.stablehlo import emit_module


def run_on_xla(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    import jax

    # without x64, device_put silently narrows i64/u64/f64 inputs to 32 bits
    jax.config.update("jax_enable_x64", True)
    device = xla_bridge.devices("cpu")[0]
    text = emit_module(kernel)
    xla_bridge.to_hlo(text)  # the compiler's input must convert too
    executable = xla_bridge.compile_stablehlo(text, device)
    arrays = [jax.device_put(np.asarray(a), device) for a in inputs]
    return [np.asarray(o) for o in xla_bridge.execute(executable, arrays)]


def run_reference(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    fn = codegen.load(codegen.generate(kernel))
    with np.errstate(all="ignore"):
        return [np.asarray(o) for o in fn(*inputs)]


def assert_same(kernel: Kernel, inputs: Sequence[np.ndarray], *, rtol: float = 0.0, atol: float = 0.0) -> None:
    """XLA and the reference agree: same dtypes and shapes, values equal (NaN equal to NaN)
    within ``rtol``/``atol`` for floats, exactly otherwise."""
    got, want = run_on_xla(kernel, inputs), run_reference(kernel, inputs)
    assert len(got) == len(want)
    for g, w, t in zip(got, want, kernel.output_types):
        assert g.dtype == t.dtype.numpy, (g.dtype, t)
        assert g.shape == t.shape == w.shape, (g.shape, w.shape, t)
        if t.dtype.is_float:
            np.testing.assert_allclose(g.astype(np.float64), np.asarray(w, dtype=t.dtype.numpy).astype(np.float64),
                                       rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, np.asarray(w).astype(t.dtype.numpy))
