"""Hardware limits and bad accesses raise typed errors that name the kernel line and the limit.

Each offending kernel line ends with a marker comment; the expected line number is looked up
from this file's source, so the tests check the exact line the interpreter blames.
"""

from pathlib import Path

import numpy as np
import pytest

import nkipy_ops_nki.nki.isa as nisa
import nkipy_ops_nki.nki.language as nl
from nkipy_core import NkipyError
from nkipy_ops_nki.errors import NKIError, NKIIndexError, NKILimitError
from nkipy_ops_nki.interpreter import run

SOURCE = Path(__file__).read_text().splitlines()


def located(marker: str, function: str) -> str:
    """The prefix an error raised at the line marked ``# <marker>`` must start with."""
    (line,) = [n for n, text in enumerate(SOURCE, 1) if text.rstrip().endswith(f"# {marker}")]
    return f"{__file__}:{line} in {function}: "


def raises(error, fn, arrays, marker, function, *phrases, grid=()):
    with pytest.raises(error) as info:
        run(fn, arrays, grid)
    message = str(info.value)
    assert message.startswith(located(marker, function)), message
    for phrase in phrases:
        assert phrase in message, message
    return message


def partition_kernel(a):
    return nl.load(a[0:256, :])  # partition-256


def test_partition_dim_over_pmax():
    raises(
        NKILimitError,
        partition_kernel,
        [np.zeros((256, 4), np.float32)],
        "partition-256",
        "partition_kernel",
        "partition dimension 256",
        "nl.tile_size.pmax (128)",
        "blocks of",
    )


def psum_kernel():
    nl.zeros((128, 1024), nl.float32, buffer=nl.psum)  # psum-1024


def test_psum_free_size_over_psum_fmax():
    raises(NKILimitError, psum_kernel, [], "psum-1024", "psum_kernel", "1024", "psum_fmax (512)")


def sbuf_helper(cols):
    """A helper in the kernel's file: the error names this line, the innermost one of the file."""
    return nl.ndarray((128, cols), nl.float32, buffer=nl.sbuf)  # sbuf-too-wide


def sbuf_kernel():
    sbuf_helper(49153)


def test_sbuf_free_size_over_its_limit_names_the_helper_line():
    nl.ndarray((128, 49152), nl.float32)  # exactly 192 KiB per partition fits
    raises(
        NKILimitError,
        sbuf_kernel,
        [],
        "sbuf-too-wide",
        "sbuf_helper",
        "196612 bytes per partition",
        "free size over its limit of 196608 bytes",
    )


def matmul_kernel(a, b):
    return nl.matmul(nl.load(a), nl.load(b))  # matmul


def nc_matmul_kernel(a, b):
    return nisa.nc_matmul(nl.load(a), nl.load(b))  # nc-matmul


def zeros(*shape):
    return np.zeros(shape, np.float32)


@pytest.mark.parametrize(
    ("kernel", "marker", "a", "b", "phrases"),
    [
        # x [M=64, K=256] is a legal tile (64 partitions), but K is contracted over partitions
        (
            matmul_kernel,
            "matmul",
            zeros(64, 256),
            zeros(128, 32),
            ["contraction dimension K is 256", "limit of 128", "acc +="],
        ),
        # stationary [K=64, M=256]: a legal tile, too wide for the PE array
        (
            nc_matmul_kernel,
            "nc-matmul",
            zeros(64, 256),
            zeros(64, 32),
            ["stationary free dimension M is 256", "limit of 128"],
        ),
        # moving [K=64, N=1024]
        (
            nc_matmul_kernel,
            "nc-matmul",
            zeros(64, 32),
            zeros(64, 1024),
            ["moving free dimension N is 1024", "limit of 512"],
        ),
    ],
)
def test_matmul_dimension_limits(kernel, marker, a, b, phrases):
    raises(NKILimitError, kernel, [a, b], marker, kernel.__name__, *phrases)


def test_matmul_operands_must_agree_on_k():
    message = raises(
        NKIError, matmul_kernel, [zeros(64, 128), zeros(96, 32)], "matmul", "matmul_kernel"
    )
    assert "contraction sizes differ" in message


def transpose_kernel(a):
    return nl.transpose(nl.load(a))  # transpose


def test_transpose_result_must_fit():
    raises(
        NKILimitError,
        transpose_kernel,
        [zeros(64, 256)],
        "transpose",
        "transpose_kernel",
        "(64, 256)",
        "at most",
    )


def load_past_end_kernel(a, masked):
    out = nl.ndarray((128, 16), nl.float32, buffer=nl.shared_hbm)
    i = 2
    ix, iy = nl.arange(128)[:, None], nl.arange(16)[None, :]
    if masked:
        nl.store(out, value=nl.load(a[i * 128 + ix, iy], mask=(i * 128 + ix < a.shape[0])))
    else:
        nl.store(out, value=nl.load(a[i * 128 + ix, iy]))  # load-past-end
    return out


def test_load_outside_the_tensor_and_the_mask_that_makes_it_legal():
    a = np.arange(300 * 16, dtype=np.float32).reshape(300, 16)
    raises(
        NKIIndexError,
        load_past_end_kernel,
        [a, False],
        "load-past-end",
        "load_past_end_kernel",
        "index 256..383 of dimension 0",
        "shape (300, 16)",
        "mask=",
    )
    (out,) = run(load_past_end_kernel, [a, True])
    np.testing.assert_array_equal(out[:44], a[256:])
    assert not out[44:].any()  # masked-out rows are not read: zeros


def store_past_end_kernel(a):
    out = nl.ndarray((100, 16), nl.float32, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], value=nl.load(a))  # store-past-end


def test_store_outside_the_tensor():
    raises(
        NKIIndexError,
        store_past_end_kernel,
        [zeros(128, 16)],
        "store-past-end",
        "store_past_end_kernel",
        "index 0..127 of dimension 0",
        "shape (100, 16)",
    )


def reduce_partitions_kernel(a):
    return nl.sum(nl.load(a), axis=0)  # reduce-axis-0


def test_reduce_over_the_partition_axis():
    raises(
        NKIError,
        reduce_partitions_kernel,
        [zeros(128, 4)],
        "reduce-axis-0",
        "reduce_partitions_kernel",
        "axis 0, the partition dimension",
        "transpose",
        "ones vector",
    )


def program_id_kernel():
    nl.program_id(1)  # program-id-1


def test_program_id_beyond_the_grid():
    raises(
        NKIError,
        program_id_kernel,
        [],
        "program-id-1",
        "program_id_kernel",
        "axis 1",
        "rank 1",
        grid=(4,),
    )
    raises(NKIError, program_id_kernel, [], "program-id-1", "program_id_kernel", "rank 0")


def hbm_compute_kernel(a):
    return a + 1.0  # hbm-compute


def test_compute_on_hbm_tensors_asks_for_a_load():
    raises(
        NKIError, hbm_compute_kernel, [zeros(4, 4)], "hbm-compute", "hbm_compute_kernel", "nl.load"
    )


def test_errors_are_nkipy_errors():
    assert issubclass(NKILimitError, NKIError) and issubclass(NKIIndexError, NKIError)
    assert issubclass(NKIError, NkipyError)
