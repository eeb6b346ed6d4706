"""A kernel that updates one of its inputs writes the new value into that input's own array
(``codegen.writes_into_param``, ``CpuRuntime.run_host_into``) only where that is sound; otherwise
the value is computed as usual and copied in after the call. Each case is checked against NumPy
on copies of the inputs, for values and for where the results live."""

import numpy as np
from ir_trace import trace

from nkipy_core import knp
from nkipy_core.ir import DType, TensorType, codegen
from nkipy_core.runtime.cpu import CpuRuntime

LARGE = TensorType((256, 256), DType.f32)  # 256 KiB: outputs of this size take ``out=``
SMALL = TensorType((8, 8), DType.f32)
RNG = np.random.default_rng(0)


def update(p, g):
    """``p - 0.1 g``: the parameter is read once, by the line that writes the new value."""
    return p - g * 0.1


def update_then_read(p, g):
    """The new value first, then another output that reads the old parameter."""
    return p - g, p * 2.0


def update_and_view(p, g):
    """The new value, and the old parameter itself (reshaped) as another output."""
    return p * 2.0 + g, knp.reshape(p, (65536,))


def inputs(*types):
    return [RNG.standard_normal(t.shape).astype(t.dtype.numpy) for t in types]


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_the_parameter_is_written_when_its_last_reader_writes_the_output():
    assert codegen.writes_into_param(trace(update, LARGE, LARGE), 0, 0)


def test_never_when_a_later_line_or_another_output_reads_the_old_parameter():
    assert not codegen.writes_into_param(trace(update_then_read, LARGE, LARGE), 0, 0)
    assert not codegen.writes_into_param(trace(update_and_view, LARGE, LARGE), 0, 0)
    # an output allocated anew at each call (below the size that takes ``out=``)
    assert not codegen.writes_into_param(trace(update, SMALL, SMALL), 0, 0)


def test_the_kernel_updates_its_input_where_it_lies():
    runtime = CpuRuntime()
    executable = runtime.compile(trace(update, LARGE, LARGE), None)
    p, g = inputs(LARGE, LARGE)
    expected, where = p - g * np.float32(0.1), address(p)
    (result,) = runtime.run_host_into(executable, [p, g], [(0, 0)])
    assert result is p and address(p) == where
    np.testing.assert_array_equal(p, expected)
    assert executable.written_in_place == 1


def test_a_value_the_kernel_cannot_write_in_place_is_copied_in_after_the_old_one_is_read():
    runtime = CpuRuntime()
    for fn in (update_then_read, update_and_view):
        executable = runtime.compile(trace(fn, LARGE, LARGE), None)
        p, g = inputs(LARGE, LARGE)
        expected = fn(p.copy(), g)
        new, other = runtime.run_host_into(executable, [p, g], [(0, 0)])
        assert new is p and executable.written_in_place == 0
        np.testing.assert_allclose(p, expected[0], rtol=1e-6)
        np.testing.assert_allclose(other, expected[1], rtol=1e-6)  # the old parameter's
        assert not np.shares_memory(other, p)


def test_an_updated_input_is_never_handed_out_as_a_later_calls_result():
    runtime = CpuRuntime()
    executable = runtime.compile(trace(update, LARGE, LARGE), None)
    p, g = inputs(LARGE, LARGE)
    for _ in range(3):  # from the second call on, an executable keeps its outputs' arrays
        # a view made for the call, as a tensor's NumPy view is: nothing else holds it after
        runtime.run_host_into(executable, [p.view(), g], [(0, 0)])
    before = p.copy()
    x = RNG.standard_normal(LARGE.shape).astype(np.float32)
    for _ in range(2):
        (result,) = runtime.run_host(executable, [x, g])
        assert not np.shares_memory(result, p)
    np.testing.assert_array_equal(p, before)
