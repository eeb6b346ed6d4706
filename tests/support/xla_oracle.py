"""Run an NKIPy kernel through the StableHLO emitter on XLA and compare with its NumPy reference.

The reference is the kernel's generated NumPy code, which is exactly what the ``cpu`` runtime
executes; so agreement here is agreement between the ``xla`` and ``cpu`` runtimes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nkipy_core.ir import Kernel, codegen
from nkipy_core.runtime.base import CompileOptions, DeviceArray
from nkipy_runtime.xla_runtime import XlaRuntime


def run_on_xla(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The kernel compiled and run by the ``xla`` runtime (which also converts it to HLO)."""
    rt = XlaRuntime()
    executable = rt.compile(kernel, CompileOptions())
    arrays = []
    for host, type_ in zip(inputs, kernel.input_types, strict=True):
        array = DeviceArray.contiguous(rt.allocate(type_.size * type_.dtype.numpy.itemsize), type_)
        rt.to_device(np.asarray(host, dtype=type_.dtype.numpy), array)
        arrays.append(array)
    return [rt.to_host(o) for o in rt.run(executable, arrays)]


def run_reference(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    fn = codegen.load(codegen.generate(kernel))
    with np.errstate(all="ignore"):
        return [np.asarray(o) for o in fn(*inputs)]


def assert_same(
    kernel: Kernel,
    inputs: Sequence[np.ndarray],
    *,
    rtol: float | Sequence[float] = 0.0,
    atol: float = 0.0,
) -> None:
    """XLA and the reference agree: same dtypes and shapes, values equal (NaN equal to NaN)
    within ``rtol``/``atol`` for floats, exactly otherwise. ``rtol`` may give one tolerance
    per output, for kernels that check several ops (and dtypes) in one compile."""
    got, want = run_on_xla(kernel, inputs), run_reference(kernel, inputs)
    assert len(got) == len(want)
    rtols = [rtol] * len(got) if np.ndim(rtol) == 0 else list(rtol)
    for i, (g, w, t, r) in enumerate(zip(got, want, kernel.output_types, rtols, strict=True)):
        where = f"output {i} ({t})"
        assert g.dtype == t.dtype.numpy, (where, g.dtype)
        assert g.shape == t.shape == w.shape, (where, g.shape, w.shape)
        if t.dtype.is_float:
            np.testing.assert_allclose(
                g.astype(np.float64),
                np.asarray(w, dtype=t.dtype.numpy).astype(np.float64),
                rtol=r,
                atol=atol,
                equal_nan=True,
                err_msg=where,
            )
        else:
            np.testing.assert_array_equal(g, np.asarray(w).astype(t.dtype.numpy), err_msg=where)


def assert_same_bits(kernel: Kernel, inputs: Sequence[np.ndarray]) -> None:
    """XLA and the reference give byte-identical outputs: for ops that only move or make data
    (shapes, gathers, constants), where even ``-0.0`` and NaN payloads must survive."""
    got, want = run_on_xla(kernel, inputs), run_reference(kernel, inputs)
    assert len(got) == len(want)
    for g, w, t in zip(got, want, kernel.output_types):
        w = np.asarray(w, dtype=t.dtype.numpy)
        assert (g.dtype, g.shape) == (w.dtype, w.shape) == (t.dtype.numpy, t.shape), (
            g.dtype,
            g.shape,
            t,
        )
        assert g.tobytes() == w.tobytes(), f"bits differ:\n{g!r}\n{w!r}"
