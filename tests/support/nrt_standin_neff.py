"""NEFFs in the text format of the stand-in libnrt (tests/runtime/nrt_standin), not Neuron's."""

from nkipy_core.ir import DType

#: the ``nrt_dtype_t`` values the stand-in (and nrt.h) use
NRT_DTYPE = {
    DType.f32: 0xA,
    DType.bf16: 0x6,
    DType.f16: 0x7,
    DType.i32: 0x8,
    DType.i64: 0xC,
    DType.u8: 0x3,
}


def neff(op: str, *tensors: tuple[str, str, DType, tuple[int, ...]]) -> bytes:
    """``op`` is ``add`` (f32 sum of the inputs) or ``copy``; tensors are (kind, name, dtype, shape)."""
    lines = ["NKIPY-STANDIN-NEFF", f"op {op}"]
    lines += [
        f"{kind} {name} {NRT_DTYPE[dt]} {'x'.join(map(str, shape))}"
        for kind, name, dt, shape in tensors
    ]
    return "\n".join(lines).encode()
