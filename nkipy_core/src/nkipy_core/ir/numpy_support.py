"""Helper functions that generated NumPy code calls.

``codegen`` copies their source into every ``kernel.py`` so a kernel file runs with NumPy and
ml_dtypes alone; the cpu runtime and the tracer's NumPy mode import them from here.
"""

import base64
import importlib

import numpy as np

#: The module attribute that declares a module's custom call host functions, a tuple of their
#: names (``NKIPY_HOST_FUNCTIONS = ("run",)``): a custom call's ``host`` may name only those.
#: ``_custom_call`` spells it out, as it is copied into ``kernel.py`` without this module.
HOST_FUNCTIONS = "NKIPY_HOST_FUNCTIONS"

#: What runs this module's collectives: ``None``, or a callable ``(kind, x, groups, **params)``
#: returning this rank's result. Kernel code never imports a transport (``kernel.py`` must run with
#: NumPy alone), so whoever executes a kernel installs one in the kernel's globals: the cpu runtime
#: puts its torch.distributed communicator there when it loads a kernel's code (``codegen.load``).
_COMMUNICATOR = None


def _blob(data, dtype, shape):
    """A large constant, stored in the source as base64 of its row-major bytes."""
    return np.frombuffer(base64.b64decode(data), dtype=dtype).reshape(shape)


def _readonly(x):
    """A value the kernel computes when it is loaded: every call shares it, so none may write it
    (a caller handed it as a result copies it first, as it does any read-only result)."""
    x = np.asarray(x)
    x.flags.writeable = False
    return x


def _skinny_matmul(x, w_t, result=None):
    """``x @ w_t`` for a 2-D ``x`` of a few rows and ``w_t`` the transpose of a row-major weight
    (a linear layer on a few tokens), computed as ``(w @ x.T).T``: BLAS then walks the large
    weight in its own order, 1.3-1.9x faster on OpenBLAS, and only the small result is
    transposed, into ``result`` or a new row-major array, as ``np.matmul`` writes."""
    flipped = np.matmul(w_t.T, x.T)
    if result is None:
        result = np.empty(flipped.shape[::-1], flipped.dtype)
    np.copyto(result, flipped.T)
    return result


def _scatter_add(x, index, updates):
    """``x`` with ``updates`` added at ``index``; repeated indices accumulate."""
    return _scatter_reduce(x, index, updates, np.add)


def _distinct(x, index):
    """Whether the index array of ``index`` (``np.s_[:, ..., i]``) names no position of ``x``
    twice, counting a negative index as the position it wraps to."""
    index = index if isinstance(index, tuple) else (index,)  # np.s_[i] is i itself
    i = np.asarray(index[-1])
    if i.size < 2:
        return True
    i = np.where(i < 0, i + x.shape[len(index) - 1], i)
    return np.unique(i).size == i.size


def _philox4x32(key, counter, rounds=10):
    """Philox4x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011).

    ``key`` is two uint32 words, ``counter`` a ``(4, n)`` uint32 array of n 128-bit counters;
    returns the ``(4, n)`` uint32 random words, one column per counter. Vectorised over columns.
    """
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    c0, c1, c2, c3 = (np.asarray(w, dtype=np.uint64) for w in counter)
    low = np.uint64(0xFFFFFFFF)
    for i in range(rounds):
        if i:
            k0, k1 = (k0 + np.uint64(0x9E3779B9)) & low, (k1 + np.uint64(0xBB67AE85)) & low
        p0, p1 = c0 * np.uint64(0xD2511F53), c2 * np.uint64(0xCD9E8D57)
        c0, c1, c2, c3 = (
            (p1 >> np.uint64(32)) ^ c1 ^ k0,
            p1 & low,
            (p0 >> np.uint64(32)) ^ c3 ^ k1,
            p0 & low,
        )
    return np.stack([c0, c1, c2, c3]).astype(np.uint32)


def _random_bits(state, shape, part):
    """The ``random_bits`` primitive: Philox4x32-10 over the uint32 state ``(key low, key high,
    counter low, counter high)``.

    Value ``i`` (row-major in ``shape``) is word ``i % 4`` of block ``counter + i // 4``, the
    128-bit counter of a block being that 64-bit sum (low word first) and two zero words.
    ``part="bits"`` gives the uint32 values, ``part="state"`` the state after them (the 64-bit
    counter advanced by the blocks used, wrapping). The uint64 arithmetic here is the
    reference's own; the state and the values are uint32 words.
    """
    state = np.asarray(state, dtype=np.uint32)
    n = int(np.prod(shape, dtype=np.int64))
    blocks = (n + 3) // 4
    low = np.uint64(0xFFFFFFFF)
    counter = np.uint64(state[2]) | (np.uint64(state[3]) << np.uint64(32))
    if part == "state":
        after = np.array([counter], dtype=np.uint64) + np.uint64(blocks)  # an array op: wraps
        words = np.concatenate([after & low, after >> np.uint64(32)]).astype(np.uint32)
        return np.concatenate([state[:2], words])
    ctr = counter + np.arange(blocks, dtype=np.uint64)
    zero = np.zeros(blocks, dtype=np.uint64)
    words = _philox4x32(state[:2], (ctr & low, ctr >> np.uint64(32), zero, zero))
    return words.T.reshape(-1)[:n].reshape(shape)


def _scatter_reduce(x, index, updates, ufunc):
    """``x`` with each update combined into its position by ``ufunc`` (``np.maximum``...).

    ``ufunc.at`` combines one element at a time, which repeated positions need; positions that
    are all distinct (a KV cache written at new positions) are combined as one vectorised
    ``ufunc`` over the rows, ten times faster for rows of a hundred elements."""
    out = np.array(x, copy=True)
    if _distinct(out, index):
        out[index] = ufunc(out[index], updates)
    else:
        ufunc.at(out, index, updates)
    return out


def _collective(kind, x, groups, **params):
    """The collective primitive ``kind`` (``all_reduce``...) on this rank's operand ``x``.

    With a communicator installed it does the work. Without one, a group of one rank is the
    identity for every collective (each rank's group holds only itself); larger groups need the
    other ranks, so that is an error. A builtin ``RuntimeError``: ``kernel.py`` runs standalone.
    """
    if _COMMUNICATOR is not None:
        return _COMMUNICATOR(kind, x, groups, **params)
    if len(groups[0]) == 1:
        return np.asarray(x)
    raise RuntimeError(
        f"{kind} over groups {groups} needs the other ranks, but no communicator is installed: run the "
        "kernel with nkipy's cpu runtime in every rank, after torch.distributed.init_process_group"
    )


def _custom_call(host, config, shape, dtype, *operands):
    """The custom_call primitive on the host: ``host`` (``module:function``) computes it.

    The module is imported on every call (a dictionary lookup once imported), so a kernel file
    that holds a custom call runs wherever the module providing it is installed; the function
    must be one the module declares a host function (``NKIPY_HOST_FUNCTIONS``, see
    ``HOST_FUNCTIONS``), so a name cannot pick any function that happens to take two arguments.
    A builtin ``RuntimeError`` on a result of the wrong type: ``kernel.py`` runs standalone.
    """
    module, _, name = host.partition(":")
    found = importlib.import_module(module)
    if name not in getattr(found, "NKIPY_HOST_FUNCTIONS", ()):
        raise RuntimeError(
            f"custom call host {host} is not a host function: {module}.NKIPY_HOST_FUNCTIONS "
            f"does not list {name!r}"
        )
    result = np.asarray(getattr(found, name)(config, *operands))
    if result.shape != tuple(shape) or result.dtype != np.dtype(dtype):
        raise RuntimeError(
            f"custom call {host} returned {result.dtype}{list(result.shape)}, but its kernel declares "
            f"{np.dtype(dtype)}{list(shape)}: the op that built this custom call computed the wrong type"
        )
    return result


def _rational(x, num, den):
    """``num(x) / den(x)``, the coefficients highest power first, by Horner's rule in place."""
    p, q = np.full_like(x, num[0]), np.full_like(x, den[0])
    for c in num[1:]:
        p *= x
        p += c
    for c in den[1:]:
        q *= x
        q += c
    p /= q
    return p


def _erf_parts(x):
    """``erf`` where ``|x| <= 1`` and ``erfc(|x|)`` elsewhere, and the mask of the first, in f64.

    Whole-array NumPy (``math.erf`` per element is a Python call each): Cody's rational
    approximations as Cephes (``ndtr.c``, S. L. Moshier) gives them, ``x T(x^2) / U(x^2)`` inside
    [-1, 1], ``exp(-x^2) P(x) / Q(x)`` up to 8 and ``exp(-x^2) R(x) / S(x)`` beyond; within a few
    f64 ulps of ``math.erf``/``math.erfc``, so f32 results round to the same float. Each part is
    computed only on the elements that need it.
    """
    t = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
         7.00332514112805075473e3, 5.55923013010394962768e4)  # fmt: skip
    u = (1.0, 3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
         2.26290000613890934246e4, 4.92673942608635921086e4)  # fmt: skip
    p = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
         4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
         9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)  # fmt: skip
    q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
         9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
         1.65666309194161350182e3, 5.57535340817727675546e2)  # fmt: skip
    r = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
         6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)  # fmt: skip
    s = (1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
         1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)  # fmt: skip
    a = np.abs(x)
    inner = a <= 1.0
    xi = x[inner]
    small = xi * _rational(xi * xi, t, u)
    outer = a[~inner]
    with np.errstate(under="ignore", invalid="ignore"):
        near = outer < 8.0
        tail = np.empty_like(outer)
        tail[near] = _rational(outer[near], p, q)
        tail[~near] = _rational(outer[~near], r, s)
        tail *= np.exp(-outer * outer)
    tail[np.isinf(outer)] = 0.0
    return small, tail, inner


def _blockwise(fn, x, block=16384):
    """``fn`` (elementwise, f64 in and out) over ``x`` in blocks of ``block`` elements, each
    computed in f64 and rounded once to ``x``'s type. The f64 temporaries of a block (a few
    dozen passes of Horner's rule) then stay in the CPU's L2 cache: 16384 measured fastest, 1.75x
    faster than whole arrays for GELU's ``erf`` over 196608 elements."""
    x = np.asarray(x)
    values = x.reshape(-1)
    out = np.empty(values.shape, x.dtype)
    for start in range(0, values.size, block):
        out[start : start + block] = fn(values[start : start + block].astype(np.float64))
    return out.reshape(x.shape)


def _erf_f64(wide):
    small, tail, inner = _erf_parts(wide)
    out = np.empty_like(wide)
    out[inner] = small
    out[~inner] = np.copysign(1.0 - tail, wide[~inner])
    return out


def _erfc_f64(wide):
    small, tail, inner = _erf_parts(wide)
    out = np.empty_like(wide)
    out[inner] = 1.0 - small
    out[~inner] = np.where(wide[~inner] < 0, 2.0 - tail, tail)
    return out


def _erf(x):
    """``erf``, computed in f64 (see ``_erf_parts``) and rounded once to ``x``'s type."""
    return _blockwise(_erf_f64, x)


def _erfc(x):
    """``erfc``, computed in f64 (see ``_erf_parts``) and rounded once to ``x``'s type; never
    ``1 - erf``, which cancels to zero in the tail."""
    return _blockwise(_erfc_f64, x)


def _conv(x, w, stride, low, high, lhs_dilation, rhs_dilation, groups):
    """The ``conv`` primitive: ``x (N, C, *S)`` dilated by ``lhs_dilation``, padded by ``low``/
    ``high`` (a negative pad crops), convolved with ``w (O, C/groups, *K)`` dilated by
    ``rhs_dilation``, every ``stride``-th window kept.

    The windows are strided views (no copy) of the padded input. A depthwise convolution (one
    input channel per group) adds one product per kernel tap over whole arrays; any other is
    one matrix product per group that BLAS runs: of the windows gathered into columns (im2col),
    or, when the result has fewer positions than the kernel taps (a weight gradient), of the
    receptive field of each position gathered into rows."""
    spatial = x.ndim - 2
    if any(d > 1 for d in lhs_dilation):
        sizes = tuple((n - 1) * d + 1 if n else 0 for n, d in zip(x.shape[2:], lhs_dilation))
        spread = np.zeros(x.shape[:2] + sizes, x.dtype)
        spread[(slice(None),) * 2 + tuple(slice(None, None, d) for d in lhs_dilation)] = x
        x = spread
    x = x[
        (slice(None),) * 2
        + tuple(slice(max(-lo, 0), n - max(-hi, 0)) for lo, hi, n in zip(low, high, x.shape[2:]))
    ]
    x = np.pad(x, ((0, 0), (0, 0)) + tuple((max(lo, 0), max(hi, 0)) for lo, hi in zip(low, high)))
    kernel = w.shape[2:]
    out = tuple(
        max((n - (k - 1) * d - 1) // s + 1, 0)
        for n, k, d, s in zip(x.shape[2:], kernel, rhs_dilation, stride)
    )
    n, c, o = x.shape[0], x.shape[1], w.shape[0]
    if 0 in out or 0 in x.shape[:2] or 0 in w.shape:
        return np.zeros((n, o) + out, x.dtype)
    taps = np.ndindex(*kernel)

    def window(tap):
        return x[
            (slice(None),) * 2
            + tuple(
                slice(t * d, t * d + s * (m - 1) + 1, s)
                for t, d, s, m in zip(tap, rhs_dilation, stride, out)
            )
        ]

    if c == groups:
        per = o // groups
        weights = w.reshape((groups, per) + kernel)
        y = np.zeros((n, groups, per) + out, x.dtype)
        for tap in taps:
            y += (
                window(tap)[:, :, None]
                * weights[(slice(None), slice(None)) + tap + (None,) * spatial]
            )
        return y.reshape((n, o) + out)
    positions, og = int(np.prod(out)), o // groups
    if positions < int(np.prod(kernel)):
        # fewer result positions than taps (a weight gradient): each position's receptive field
        # is a row, and (group, batch·position) rows times the weight is one product per group
        spans = [(k - 1) * d + 1 for k, d in zip(kernel, rhs_dilation)]
        fields = [
            x[
                (slice(None),) * 2
                + tuple(
                    slice(q * s, q * s + span, d)
                    for q, s, span, d in zip(position, stride, spans, rhs_dilation)
                )
            ]
            for position in np.ndindex(*out)
        ]
        rows = np.stack(fields, axis=1).reshape(n, positions, groups, -1).transpose(2, 0, 1, 3)
        y = np.matmul(
            rows.reshape(groups, n * positions, -1), w.reshape(groups, og, -1).transpose(0, 2, 1)
        )
        return y.reshape(groups, n, positions, og).transpose(1, 0, 3, 2).reshape((n, o) + out)
    # the windows as columns (group, channel·tap, batch·position): one product per group
    cols = np.stack([window(tap).swapaxes(0, 1) for tap in taps], axis=1)
    y = np.matmul(w.reshape(groups, og, -1), cols.reshape(groups, -1, n * positions))
    return y.reshape(groups, og, n, positions).transpose(2, 0, 1, 3).reshape((n, o) + out)


def _tap_slices(tap, stride, low, rhs_dilation, grid, out):
    """Where tap ``tap`` of a ``conv_transpose`` lands: the input positions whose products with
    it reach the result, and the result positions they reach (strided slices), or ``None``."""
    starts = [t * d - lo for t, d, lo in zip(tap, rhs_dilation, low)]
    first = [max(-(a // s), 0) for a, s in zip(starts, stride)]
    last = [min(q, (e - 1 - a) // s + 1) for a, s, q, e in zip(starts, stride, grid, out)]
    if any(f >= e for f, e in zip(first, last)):
        return None
    source = tuple(slice(f, e) for f, e in zip(first, last))
    target = tuple(
        slice(a + f * s, a + (e - 1) * s + 1, s) for a, f, e, s in zip(starts, first, last, stride)
    )
    return source, target


def _conv_transpose(x, w, stride, low, high, rhs_dilation, groups):
    """The ``conv_transpose`` primitive: ``x (N, O, *S)`` through the adjoint of the
    convolution with ``w (O, C/groups, *K)``. Every input position's products with every tap
    are one matrix product per group, with the weight as it lies in memory; each tap's products
    are then summed into place (col2im): ``x[q]`` times tap ``k`` lands at ``q * stride + k *
    rhs_dilation - low`` of the result. With one channel per group (depthwise) each tap's
    products are one multiplication over the whole input instead: summed into place when
    strided, else ``_conv``'s per-tap products with the reversed weight (a view)."""
    n, o, cg = x.shape[0], x.shape[1], w.shape[1]
    spatial, kernel, grid = x.ndim - 2, w.shape[2:], x.shape[2:]
    spans = [(q - 1) * s + 1 for q, s in zip(grid, stride)]
    reach = [(k - 1) * d for k, d in zip(kernel, rhs_dilation)]
    out = tuple(m + r - lo - hi for m, r, lo, hi in zip(spans, reach, low, high))
    if 0 in x.shape or 0 in w.shape or 0 in out:
        return np.zeros((n, groups * cg) + out, x.dtype)
    everything = (slice(None),) * 3
    if o == groups and all(s == 1 for s in stride):
        flipped = np.flip(w.reshape((groups, 1, cg) + kernel), tuple(range(3, spatial + 3)))
        return _conv(
            x,
            flipped.reshape((groups * cg, 1) + kernel),
            (1,) * spatial,
            tuple(r - lo for r, lo in zip(reach, low)),
            tuple(e - m + lo for e, m, lo in zip(out, spans, low)),
            stride,
            rhs_dilation,
            groups,
        )
    y = np.zeros((n, groups, cg) + out, x.dtype)
    if o == groups:
        # a strided one: spread with zeros for _conv, 3/4 of its products would be with zeros
        values = x.reshape((n, groups, 1) + grid)
        weights = w.reshape((1, groups, cg) + kernel + (1,) * spatial)
        for tap in np.ndindex(*kernel):
            places = _tap_slices(tap, stride, low, rhs_dilation, grid, out)
            if places is not None:
                source, target = places
                y[everything + target] += values[everything + source] * weights[everything + tap]
        return y.reshape((n, groups * cg) + out)
    og, taps = o // groups, int(np.prod(kernel))
    weight = w.reshape(groups, og, cg * taps)
    rows = x.reshape((n, groups, og, -1)).transpose(1, 2, 0, 3).reshape(groups, og, -1)
    cols = np.matmul(weight.swapaxes(1, 2), rows).reshape((groups, cg) + kernel + (n,) + grid)
    batch_first = (2, 0, 1) + tuple(range(3, spatial + 3))
    for tap in np.ndindex(*kernel):
        places = _tap_slices(tap, stride, low, rhs_dilation, grid, out)
        if places is not None:
            source, target = places
            values = cols[(slice(None), slice(None)) + tap].transpose(batch_first)
            y[everything + target] += values[everything + source]
    return y.reshape((n, groups * cg) + out)


HELPERS = (
    _readonly,
    _blob,
    _skinny_matmul,
    _distinct,
    _scatter_add,
    _scatter_reduce,
    _philox4x32,
    _random_bits,
    _collective,
    _custom_call,
    _rational,
    _erf_parts,
    _blockwise,
    _erf_f64,
    _erfc_f64,
    _erf,
    _erfc,
    _conv,
    _tap_slices,
    _conv_transpose,
)
