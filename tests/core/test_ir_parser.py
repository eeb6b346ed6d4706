"""The IR parser: printed kernels read back exactly, anything else is an ``IRParseError`` naming
its line, and the cpu runtime runs no code it finds in a kernel cache."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from fresh_python import python

from nkipy_core import knp
from nkipy_core.errors import IRParseError, VerificationError
from nkipy_core.ir import DType, Kernel, KernelBuilder, TensorType
from nkipy_core.ir.parser import parse_kernel
from nkipy_core.ir.printer import format_kernel, kernel_data
from nkipy_core.runtime.cpu import CpuRuntime

F32 = TensorType((4, 8), DType.f32)


def _kernel(body, *types: TensorType) -> Kernel:
    b = KernelBuilder("k")
    params = [b.param(t) for t in types or (F32,)]
    with b.building("test rule"):
        outs = body(*params)
    return b.finish(outs if isinstance(outs, tuple) else (outs,))


def assert_round_trip(kernel: Kernel) -> None:
    """``kernel`` printed, with and without origins, parses back to itself and prints the same."""
    data = json.loads(json.dumps(kernel_data(kernel)))  # as the cpu runtime stores it
    for with_origin in (False, True):
        text = format_kernel(kernel, with_origin=with_origin)
        parsed = parse_kernel(text, data)
        assert format_kernel(parsed, with_origin=with_origin) == text
        assert parsed == kernel


BODIES = {
    "elementwise": lambda x: knp.tanh(knp.exp(x) * 2.5 - x) / (x + 1),
    "compare_select": lambda x: knp.where(x > 0, x, knp.negative(x)),
    "half_floats": lambda x: (knp.astype(x, DType.bf16) * 3, knp.astype(x, DType.f16) + 1),
    "f64_to_bf16": lambda x: knp.astype(knp.astype(x, DType.f64), DType.bf16),
    "shapes": lambda x: knp.reshape(knp.transpose(x)[1:7:2, ::3], (-1,)),
    "concatenate_pad": lambda x: knp.pad(knp.concatenate([x, x], axis=1), ((1, 0), (0, 2)), 1.5),
    "reductions": lambda x: (knp.sum(x, axis=(0, 1)), knp.max(x, axis=0, keepdims=True)),
    "argreduce_sort": lambda x: (knp.argmax(x, axis=1), knp.sort(x, axis=0, descending=True)),
    "scans": lambda x: (knp.cumsum(x, axis=1), knp.cummax(x, axis=0)),
    "gathers": lambda x: (
        knp.take(x, np.array([3, 0, 1], np.int64), axis=0),
        knp.take_along_axis(x, knp.argsort(x, axis=1), axis=1),
    ),
    "scatters": lambda x: (
        knp.scatter_add(x, np.array([0, 0, 2], np.int64), np.ones((3, 8), np.float32)),
        knp.scatter_reduce(x, np.array([1], np.int64), np.zeros((1, 8), np.float32), "max"),
    ),
    "dot_iota": lambda x: knp.matmul(x, knp.astype(knp.reshape(knp.arange(32), (8, 4)), DType.f32)),
    "inf_nan_constants": lambda x: (
        knp.where(knp.isnan(x), np.float32(np.inf), x),
        knp.maximum(x, np.array([-np.inf, np.nan, 0.1, -0.0] * 2, np.float32)),
    ),
    "large_constant": lambda x: x + np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8),
    "bool_and_int_constants": lambda x: (
        knp.logical_and(x > 0, np.array([True, False] * 4)),
        knp.astype(x, DType.i64) + np.int64(2**40),
    ),
    "bf16_constant": lambda x: knp.astype(x, DType.bf16) * np.asarray(1.0078125, DType.bf16.numpy),
    "f64_constant": lambda x: knp.astype(x, DType.f64) + np.float64(1 + 2**-40),
    "random_bits": lambda x: (
        knp.random_bits(knp.astype(knp.reshape(x, (-1,))[:4], DType.u32), (4, 8)),
        knp.random_state(knp.astype(knp.reshape(x, (-1,))[4:8], DType.u32), (4, 8)),
    ),
    "collectives": lambda x: (
        knp.all_reduce(x, "sum", [[0]]),
        knp.all_gather(x, 1, [[0]]),
        knp.collective_broadcast(x, 0, ((0,),)),
    ),
    "custom_call": lambda x: knp.custom_call(
        [x, x],
        target="TestTarget",
        config="2.0 'quoted' \"and\" \\ more\n" * 50,
        host="custom_call_hosts:scaled_add",
        shape=(4, 8),
        dtype=np.float32,
    ),
}


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_built_kernels_read_back_as_printed(body):
    import custom_call_hosts  # noqa: F401 - a custom call's host module must be imported

    assert_round_trip(_kernel(body))


def test_empty_and_scalar_kernels_read_back():
    scalar = TensorType((), DType.f32)
    assert_round_trip(_kernel(lambda x: x + np.float32(1), scalar))
    assert_round_trip(_kernel(lambda x: (x, knp.full((1, 0, 3), 2.0)), scalar))
    assert_round_trip(KernelBuilder("none").finish(()))


def test_every_kernel_a_real_program_compiles_reads_back(monkeypatch, tmp_path):
    """Kernels that the base pack lowers from real torch programs, as the cpu runtime gets them."""
    pytest.importorskip("nkipy_ops_base")
    compiled: list[Kernel] = []
    real = CpuRuntime.compile
    monkeypatch.setattr(
        CpuRuntime, "compile", lambda self, k, o: compiled.append(k) or real(self, k, o)
    )

    def programs(x, w, idx):
        h = torch.nn.functional.gelu(x @ w).to(torch.bfloat16)
        soft = torch.softmax(h.float(), dim=-1).masked_fill(x[:, :1] > 1, float("-inf"))
        top = torch.topk(x, 3, dim=1)
        return (
            soft,
            torch.nn.functional.layer_norm(x, (8,)),
            top.values,
            top.indices,
            torch.cumsum(x, 0),
            x.index_add(0, idx, torch.ones(3, 8)),
            torch.cat([x, x.flip(0)], 1)[::2],
            torch.nn.functional.pad(x, (1, 2), value=float("nan")),
            x.half().sum(1),
            torch.argmax(x, 1),
            torch.clamp(x, min=-math.inf, max=0.5),
        )

    args = (torch.randn(4, 8), torch.randn(8, 8), torch.tensor([0, 2, 2]))
    torch.compile(programs, backend="nkipy", options={"nkipy_cache": str(tmp_path)})(*args)
    assert compiled
    for kernel in compiled:
        assert_round_trip(kernel)


# -- rejection ------------------------------------------------------------------------------

GOOD = textwrap.dedent("""\
    kernel k(%v0: f32[4x8]) {
      %v1: f32[4x8] = exp(%v0)
      %v2: f32[8x4] = transpose(%v1) {perm=(1, 0)}
      return %v2
    }
""")


def test_the_sample_text_parses_and_no_text_is_an_error():
    assert format_kernel(parse_kernel(GOOD), with_origin=False) == GOOD
    for text in ("", "\n", GOOD.rstrip("\n")):
        with pytest.raises(IRParseError, match="line 1: expected|line 5: expected a newline"):
            parse_kernel(text)


@pytest.mark.parametrize(
    ("old", "new", "line", "expected"),
    [
        ("  return", '  import os; open("PWNED", "w")\n  return', 4, "expected an op"),
        ("exp(%v0)", "system(%v0)", 2, "expected a primitive, found 'system'"),
        ("exp(%v0)", "exp(%v7)", 2, "expected an operand defined above, found %v7"),
        ("%v1: f32[4x8] =", "%v1: float32[4, 8] =", 2, "expected an op"),
        ("perm=(1, 0)", "perm=__import__('os')", 3, "a literal, not the name '__import__'"),
        ("perm=(1, 0)", "perm=(1, 0).__class__", 3, "`, ` or `}`"),
        ("perm=(1, 0)", "perm=[1, 0]", 3, "expected a literal"),
        ("{perm=(1, 0)}", "{perm=(1, 0)} garbage", 3, "expected the end of the line"),
        ("%v2\n}\n", "%v2\n}\ngarbage\n", 5, "expected `}` as the last line"),
        ("%v2\n}", "%v2\n}\n}", 5, "expected `}` as the last line"),
        ("  return %v2\n", "", 4, "expected an op"),
        ("kernel k(", "kernel k'''(", 1, "expected `kernel NAME("),
        ("exp(%v0)", "exp(%v0)\r", 2, "printable"),
        ("f32[8x4] = transpose", "f32[4x8] = transpose", 3, "result type f32[8x4]"),
        ("perm=(1, 0)", "perm=(0, 1, 2)", 3, "well-typed transpose"),
        ("%v1: f32[4x8] = exp", "%v0: f32[4x8] = exp", 2, "%v0 is defined twice"),
        ("  return %v2", "  return %v9", 4, "found %v9"),
        ("perm=(1, 0)", "perm=(1,0)", 3, "expected `, ` or `)`"),
        (
            "perm=(1, 0)",
            "perm=(1, 0,)",
            3,
            "expected '  %v2: f32[8x4] = transpose(%v1) {perm=(1, 0)}'",
        ),
    ],
)
def test_anything_but_printed_ir_is_an_error_naming_its_line(old, new, line, expected):
    assert old in GOOD
    with pytest.raises(IRParseError, match=rf"^IR text, line {line}: .*") as info:
        parse_kernel(GOOD.replace(old, new, 1))
    assert expected in str(info.value)
    assert info.value.line == line and isinstance(info.value, VerificationError)


def test_constants_come_from_the_data_which_must_fit():
    kernel = _kernel(lambda x: x + np.arange(32, dtype=np.float32).reshape(4, 8))
    text, data = format_kernel(kernel, with_origin=False), kernel_data(kernel)
    ((key, _),) = data.items()
    with pytest.raises(IRParseError, match="expected the constant's bytes in the data"):
        parse_kernel(text)
    with pytest.raises(IRParseError, match="expected 32 f32"):
        parse_kernel(text, {key: "AAAA"})
    with pytest.raises(IRParseError, match="expected base64"):
        parse_kernel(text, {key: "not base64!"})
    with pytest.raises(IRParseError, match="sha256"):  # other bytes print another digest
        parse_kernel(text, {key: base64.b64encode(np.ones(32, np.float32).tobytes()).decode()})
    with pytest.raises(IRParseError, match="line 5: expected no more data"):
        parse_kernel(GOOD, {"v9.value": "AAAA"})


def test_a_custom_call_host_must_be_declared_by_an_imported_module():
    import custom_call_hosts  # noqa: F401

    kernel = _kernel(BODIES["custom_call"])
    text, data = format_kernel(kernel, with_origin=False), kernel_data(kernel)
    for host in ("os:system", "subprocess:getoutput", "custom_call_hosts:np", "never_imported:f"):
        tampered = text.replace("custom_call_hosts:scaled_add", host)
        with pytest.raises(IRParseError, match=rf"line 2: .*found '{host}'"):
            parse_kernel(tampered, data)


# -- the kernel cache -----------------------------------------------------------------------

# A user program in a fresh process: the test pack lowers exp and mul into one kernel, cached
# under argv[1]; prints the result's check and the cache hits.
TAMPERED = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, {here!r})
    from fixture_packs import arithmetic_rules, pack
    from nkipy_core import cache_stats, plugins
    plugins.register(pack(arithmetic_rules(priority=1000)), "arith", "arith-pack", "1.0")
    plugins.reload()
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    out = torch.compile(lambda a: torch.exp(a) * a, backend="nkipy",
                        options={{"nkipy_cache": sys.argv[1]}})(x)
    print(bool(torch.allclose(out, torch.exp(x) * x)), cache_stats["hits"])
""").format(here=str(Path(__file__).parent))


def _rewrite(entry, name: str, text: str) -> None:
    """Write ``name`` in a cache entry, make ``meta.json`` record its new checksum and seal it
    with this user's key: the parser must hold even when the cache's seal does not (the seal's
    own tests are in test_cache_trust.py)."""
    from nkipy_core.cache import trust

    (entry / name).write_text(text)
    meta_path = entry / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["files"][name] = hashlib.sha256(text.encode()).hexdigest()
    meta_path.write_text(json.dumps(meta))
    (entry / trust.SEAL_FILE).write_text(json.dumps({"mac": trust.seal(meta_path.read_bytes())}))


def test_a_new_process_runs_no_code_planted_in_the_kernel_cache(tmp_path):
    cache, marker = tmp_path / "cache", tmp_path / "PWNED"
    cold = python(TAMPERED, str(cache), NKIPY_RUNTIME=None)
    assert cold.stdout.split() == ["True", "0"], cold.stderr
    (entry,) = (cache / "kernels").iterdir()
    payload = f"open({str(marker)!r}, 'w').close()\n"
    _rewrite(entry, "kernel.py", payload + (entry / "kernel.py").read_text())
    _rewrite(entry, "artifacts/kernel.ir", payload + (entry / "artifacts/kernel.ir").read_text())
    warm = python(TAMPERED, str(cache), NKIPY_RUNTIME=None)
    assert not marker.exists()
    # refused by the parser, then compiled again: the right result
    assert warm.stdout.split()[0] == "True", warm.stderr
    assert "does not load (IR text, line 1" in warm.stderr


def test_a_new_process_runs_the_kernel_from_its_ir_not_from_kernel_py(tmp_path):
    cache, marker = tmp_path / "cache", tmp_path / "PWNED"
    assert python(TAMPERED, str(cache), NKIPY_RUNTIME=None).stdout.split() == ["True", "0"]
    (entry,) = (cache / "kernels").iterdir()
    _rewrite(entry, "kernel.py", f"open({str(marker)!r}, 'w').close()\n")
    warm = python(TAMPERED, str(cache), NKIPY_RUNTIME=None)
    assert warm.stdout.split() == ["True", "1"], warm.stderr  # a hit: the entry was loaded
    assert not marker.exists()
