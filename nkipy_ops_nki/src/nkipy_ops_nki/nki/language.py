"""``nki.language`` (``nl``), interpreted with NumPy.

Supported:

- memories and tensors: ``shared_hbm`` (alias ``hbm``), ``sbuf``, ``psum``; ``ndarray``,
  ``zeros``, ``ones``, ``full``, ``zeros_like``, ``par_dim``; ``x.shape``, ``x.dtype``, HBM
  ``x.reshape(shape)``, tile ``t.broadcast_to(shape)`` and ``broadcast_to(t, shape)``;
- moving data: ``load(src, mask=, dtype=)``, ``store(dst, value=, mask=)``;
- indexing: ints, slices, ``...``, ``arange`` grids with ``[:, None]`` / ``[None, :]`` and affine
  arithmetic, ``mgrid[0:p, 0:f]``; comparisons of indices are masks (combine with ``&``, ``|``, ``~``);
- elementwise ops (fp32 inside, ``dtype=`` and ``mask=`` on each) and the Python operators on tiles;
  ``gelu`` is the exact (erf) form, ``gelu_apprx_tanh`` the tanh approximation;
- reductions ``sum``, ``max``, ``min``, ``mean``, ``prod`` over free axes, with ``keepdims=``;
- ``matmul(x, y, transpose_x=)``, ``transpose``;
- launch: ``program_id``, ``num_programs``, ``program_ndim``, ``spmd_dim``, ``nc``;
  loops ``affine_range``, ``sequential_range``, ``static_range`` (Python ranges here);
- ``tile_size`` (``pmax``, ``psum_fmax``, ``gemm_stationary_fmax``, ``gemm_moving_fmax``) and the
  dtypes ``float32``, ``bfloat16``, ``float16``, ``int32``, ``int16``, ``int8``, ``uint32``,
  ``uint8``, ``bool_``.

Launching (``nki.jit``, ``kernel[grid](...)``) is ``nkipy_ops_nki.NKIKernel``'s. Not interpreted:
the ``nki.isa`` instruction set beyond ``nc_matmul``/``nc_transpose``, dynamic control flow on
tile values, scheduling and performance.
"""

from nkipy_ops_nki.interpreter.dtypes import (
    bfloat16,
    bool_,
    float16,
    float32,
    int8,
    int16,
    int32,
    uint8,
    uint32,
)
from nkipy_ops_nki.interpreter.indexing import arange, mgrid
from nkipy_ops_nki.interpreter.launch import nc, num_programs, program_id, program_ndim, spmd_dim
from nkipy_ops_nki.interpreter.limits import tile_size
from nkipy_ops_nki.interpreter.matmul import matmul, transpose
from nkipy_ops_nki.interpreter.memory import (
    broadcast_to,
    full,
    load,
    ndarray,
    ones,
    par_dim,
    store,
    zeros,
    zeros_like,
)
from nkipy_ops_nki.interpreter.ops import (
    abs,
    add,
    ceil,
    copy,
    cos,
    divide,
    equal,
    erf,
    exp,
    floor,
    gelu,
    gelu_apprx_tanh,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    logical_and,
    logical_not,
    logical_or,
    max,
    maximum,
    mean,
    min,
    minimum,
    multiply,
    negative,
    not_equal,
    power,
    prod,
    reciprocal,
    relu,
    rsqrt,
    select,
    sigmoid,
    sign,
    silu,
    sin,
    softplus,
    sqrt,
    square,
    subtract,
    sum,
    tanh,
    where,
)
from nkipy_ops_nki.interpreter.tiles import psum, sbuf, shared_hbm

hbm = shared_hbm
affine_range = sequential_range = static_range = range
