"""The Neuron target profile: each documented rule is found in HLO that breaks it (and not in HLO
that keeps it), the int64 mode and compiler flags per target, and the check in
``NrtRuntime.compile`` that refuses a module before the compiler starts.

The HLO here is written by hand in the text form jaxlib prints, so each rule is checked on
exactly the instruction it is about. Whether ``neuronx-cc`` itself agrees is known only on a
Neuron host; these tests hold the checker to the documented rules.
"""

from __future__ import annotations

import numpy as np
import pytest

from nkipy_core import ConfigurationError
from nkipy_core.ir import ConstantData, DType, KernelBuilder, TensorType
from nkipy_core.runtime import CompileOptions
from nkipy_runtime.neuron import NeuronProfile, NeuronProfileError, profile_for, violations
from nkipy_runtime.neuron.hlo_text import parse
from nkipy_runtime.nrt_runtime import NrtRuntime

pytest.importorskip("jax", reason="HLO conversion needs the nkipy-runtime[xla] extra")

TRN1 = NeuronProfile("trn1", native_int64=False)
TRN2 = NeuronProfile("trn2", native_int64=True)

ADD = """%add_region (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add.1 = f32[] add(%a, %b)
}
"""


def module(body: str, regions: str = "") -> str:
    """An HLO module whose entry holds ``body`` (instruction lines), after ``regions``."""
    lines = "\n".join("  " + line.strip() for line in body.strip().splitlines())
    return f"HloModule m\n\n{regions}\nENTRY %main (p: f32[4]) -> f32[4] {{\n{lines}\n}}\n"


def rules(text: str, profile: NeuronProfile = TRN1) -> list[str]:
    return [v.rule.name for v in violations(text, profile)]


BROKEN = {
    "opcode": module("%p = f32[4]{0} parameter(0)\nROOT %c = f32[4]{0} cholesky(%p)"),
    "element-type": module("%p = f64[4]{0} parameter(0)\nROOT %n = f64[4]{0} negate(%p)"),
    "static-shape": module("%p = f32[<=4]{0} parameter(0)\nROOT %n = f32[<=4]{0} negate(%p)"),
    "sort-comparator": module(
        "%p = f32[4]{0} parameter(0)\nROOT %s = f32[4]{0} sort(%p), dimensions={0}, to_apply=%cmp",
        """%cmp (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %lt = pred[] compare(%a, %b), direction=LT
  %nan = pred[] compare(%b, %b), direction=NE
  ROOT %or = pred[] or(%lt, %nan)
}
""",
    ),
    "custom-call": module(
        '%p = f32[4]{0} parameter(0)\nROOT %c = f32[4]{0} custom-call(%p), custom_call_target="my_host_fn"'
    ),
    "u64-constant": module("ROOT %c = u64[] constant(1099511627776)"),
    "int64-constant": module("ROOT %c = s64[] constant(9223372036854775807)"),
    "u64-value": module("%p = u64[4]{0} parameter(0)\nROOT %n = u64[4]{0} multiply(%p, %p)"),
    "integer-dot": module(
        "%p = s32[4,4]{1,0} parameter(0)\nROOT %d = s32[4,4]{1,0} dot(%p, %p), "
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    ),
    "integer-collective": module(
        "%p = s32[4]{0} parameter(0)\nROOT %r = s32[4]{0} all-reduce(%p), replica_groups={{0,1}}, "
        "to_apply=%iadd",
        """%iadd (a: s32[], b: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %add.1 = s32[] add(%a, %b)
}
""",
    ),
    "s64-power": module("%p = s64[4]{0} parameter(0)\nROOT %w = s64[4]{0} power(%p, %p)"),
    "shift-right-arithmetic": module(
        "%p = s64[4]{0} parameter(0)\nROOT %w = s64[4]{0} shift-right-arithmetic(%p, %p)"
    ),
    "control-flow": module(
        "%p = pred[] parameter(0)\nROOT %c = f32[] conditional(%p), branch_computations={%a, %b}"
    ),
    "dynamic-update-slice": module(
        "%p = f32[4]{0} parameter(0)\n%u = f32[1]{0} parameter(1)\n%i = s32[] parameter(2)\n"
        "ROOT %d = f32[4]{0} dynamic-update-slice(%p, %u, %i)"
    ),
    "gather": module(
        "%p = f32[4,4]{1,0} parameter(0)\n%i = s32[2,2]{1,0} parameter(1)\n"
        "ROOT %g = f32[2]{0} gather(%p, %i), offset_dims={}, collapsed_slice_dims={0,1}, "
        "start_index_map={0,0}, index_vector_dim=1, slice_sizes={1,1}"
    ),
    "rng-algorithm": module(
        "%s = u64[2]{0} parameter(0)\nROOT %r = (u64[2]{0}, u32[4]{0}) rng-bit-generator(%s), "
        "algorithm=rng_philox"
    ),
}


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_each_rule_is_found_where_it_is_broken(rule):
    assert rule in rules(BROKEN[rule])


def test_reduce_rules_variadic_combiner_and_init():
    variadic = module(
        "%p = f32[4]{0} parameter(0)\n%i = s32[4]{0} parameter(1)\n%z = f32[] constant(0)\n"
        "%k = s32[] constant(0)\nROOT %r = (f32[], s32[]) reduce(%p, %i, %z, %k), dimensions={0}, "
        "to_apply=%add_region",
        ADD,
    )
    assert "a variadic reduce of 2 results" in [v.detail for v in violations(variadic, TRN1)]
    logical = module(
        "%p = pred[4]{0} parameter(0)\n%z = pred[] constant(false)\n"
        "ROOT %r = pred[] reduce(%p, %z), dimensions={0}, to_apply=%or_region",
        """%or_region (a: pred[], b: pred[]) -> pred[] {
  %a = pred[] parameter(0)
  %b = pred[] parameter(1)
  ROOT %o = pred[] or(%a, %b)
}
""",
    )
    assert [v.detail for v in violations(logical, TRN1)] == ["combiner or"]
    not_constant = module(
        "%p = f32[4]{0} parameter(0)\n%z = f32[] parameter(1)\n"
        "ROOT %r = f32[] reduce(%p, %z), dimensions={0}, to_apply=%add_region",
        ADD,
    )
    assert rules(not_constant) == ["reduce"]
    fine = module(
        "%p = f32[4]{0} parameter(0)\n%z = f32[] constant(0)\n"
        "ROOT %r = f32[] reduce(%p, %z), dimensions={0}, to_apply=%add_region",
        ADD,
    )
    assert rules(fine) == []


def test_integer_scatter_that_combines_is_refused_and_one_that_overwrites_is_not():
    def scatter(region_root: str) -> str:
        return module(
            "%p = s32[4]{0} parameter(0)\n%i = s32[2,1]{1,0} parameter(1)\n%u = s32[2]{0} parameter(2)\n"
            "ROOT %s = s32[4]{0} scatter(%p, %i, %u), update_window_dims={}, inserted_window_dims={0}, "
            "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%combine",
            f"""%combine (a: s32[], b: s32[]) -> s32[] {{
  %a = s32[] parameter(0)
  {"ROOT %b = s32[] parameter(1)" if region_root == "overwrite" else "%b = s32[] parameter(1)"}
  {"" if region_root == "overwrite" else "ROOT %add.1 = s32[] add(%a, %b)"}
}}
""",
        )

    assert rules(scatter("add")) == ["integer-scatter"]
    assert rules(scatter("overwrite")) == []


def test_constants_in_range_and_native_int64():
    big = module("ROOT %c = s64[] constant(-4294967296)")
    assert rules(big, TRN1) == ["int64-constant"]
    assert rules(big, TRN2) == []  # native 64-bit integers keep it
    assert rules(module("ROOT %c = s64[3]{0} constant({1, -2147483648, 2147483647})")) == []
    assert rules(module("ROOT %c = u64[] constant(4294967295)"), TRN2) == []
    assert rules(BROKEN["u64-constant"], TRN2) == ["u64-constant"]  # ESFH002 on every target


def test_fp8_e4m3fn_only_on_trn3():
    text = module("%p = f8e4m3fn[4]{0} parameter(0)\nROOT %n = f8e4m3fn[4]{0} negate(%p)")
    assert "element-type" in rules(text, NeuronProfile("trn2", True))
    assert "element-type" not in rules(text, NeuronProfile("trn3", True))


def test_a_violation_names_the_aten_op_it_came_from():
    text = module(
        '%p = f64[4]{0} parameter(0)\nROOT %n = f64[4]{0} negate(%p), metadata={op_name="aten.neg.default via base.neg"}'
    )
    (found,) = [v for v in violations(text, TRN1) if v.opcode == "negate"]
    assert str(found) == (
        "negate on f64 (from aten.neg.default via base.neg): f64 on trn1 [element-type]"
    )


def test_hlo_text_reader_reads_what_jaxlib_prints():
    from nkipy_runtime.hlo_files import HLO_TEXT, hlo_artifacts

    kb = KernelBuilder("k")
    x = kb.param(TensorType((3, 4), DType.f32))
    with kb.building("aten.sum.dim_IntList via base.sum"):
        total = kb.emit("reduce", [x], {"kind": "sum", "axes": (1,), "keepdims": False})
    text = hlo_artifacts(kb.finish([total]))[HLO_TEXT].decode()
    parsed = parse(text)
    (reduce,) = [i for i in parsed.instructions() if i.opcode == "reduce"]
    assert reduce.origin == "aten.sum.dim_IntList via base.sum"
    assert reduce.types == ("f32",) and len(reduce.operands) == 2
    (combiner,) = reduce.called()
    assert [i.opcode for i in parsed.computations[combiner]][-1] == "add"
    assert violations(text, TRN1) == []


def test_profiles_per_target_and_int64_mode(monkeypatch):
    monkeypatch.delenv("NKIPY_NEURON_INT64", raising=False)
    monkeypatch.delenv("NKIPY_NEURON_F64", raising=False)
    assert profile_for("trn1") == TRN1
    assert profile_for("trn2") == TRN2
    assert TRN1.compiler_flags() == ("--implicit-integer-downcast=none",)
    assert TRN2.compiler_flags() == ("--native-int64=enabled", "--implicit-integer-downcast=none")
    monkeypatch.setenv("NKIPY_NEURON_INT64", "32")
    assert profile_for("trn3") == NeuronProfile("trn3", native_int64=False)
    assert profile_for("trn3").compiler_flags()[0] == "--native-int64=disabled"
    monkeypatch.setenv("NKIPY_NEURON_INT64", "native")
    with pytest.raises(ConfigurationError, match="trn1 has no 64-bit integers"):
        profile_for("trn1")
    monkeypatch.setenv("NKIPY_NEURON_INT64", "64")
    with pytest.raises(ConfigurationError, match="use 'native' or '32'"):
        profile_for("trn2")
    monkeypatch.delenv("NKIPY_NEURON_INT64")
    monkeypatch.setenv("NKIPY_NEURON_F64", "f32")
    assert profile_for("trn2").name == "trn2 (native int64, f64 as f32)"
    monkeypatch.setenv("NKIPY_NEURON_F64", "yes")
    with pytest.raises(ConfigurationError, match="use 'f32'"):
        profile_for("trn2")


def test_narrowed_f64_kernel_has_no_f64_and_matches_f32_on_xla():
    """The opt-in downcast: the kernel rebuilt in f32 (literals included) runs on XLA and equals
    the same computation done in f32."""
    from xla_oracle import assert_same

    from nkipy_runtime.hlo_files import HLO_TEXT, hlo_artifacts
    from nkipy_runtime.neuron.f64 import narrow_f64

    kb = KernelBuilder("wide")
    x = kb.param(TensorType((5,), DType.f64))
    third = kb.emit(
        "constant", [], {"value": ConstantData.from_array(np.full((5,), 1 / 3), DType.f64)}
    )
    y = kb.emit("exp", [kb.emit("mul", [x, third], {})], {})
    narrowed = narrow_f64(kb.finish([y]))
    assert [p.type.dtype for p in narrowed.params] == [DType.f32]
    assert "f64" not in hlo_artifacts(narrowed)[HLO_TEXT].decode()
    assert_same(narrowed, [np.linspace(-2, 2, 5, dtype=np.float32)], rtol=1e-6)


def test_compile_refuses_a_module_that_breaks_the_profile_before_the_compiler(monkeypatch):
    """An f64 kernel never reaches neuronx-cc (none is installed here: reaching it would be a
    RuntimeUnavailableError instead); the error names opcode, type, target and ATen op."""
    monkeypatch.delenv("NKIPY_NEURON_INT64", raising=False)
    kb = KernelBuilder("double")
    x = kb.param(TensorType((4,), DType.f64))
    with kb.building("aten.mul.Tensor via base.mul"):
        y = kb.emit("mul", [x, x], {})
    with pytest.raises(NeuronProfileError) as caught:
        NrtRuntime().compile(kb.finish([y]), CompileOptions(target="trn1"))
    message = str(caught.value)
    assert "kernel double breaks" in message and "Neuron trn1 (32-bit int64) profile" in message
    assert "multiply on f64 (from aten.mul.Tensor via base.mul): f64 on trn1" in message
    assert "data-types.html" in message


def test_declines_says_why_and_accepts_what_the_target_takes(monkeypatch):
    monkeypatch.delenv("NKIPY_NEURON_INT64", raising=False)
    runtime = NrtRuntime()

    def one(dtype: DType) -> object:
        kb = KernelBuilder("trial")
        x = kb.param(TensorType((4,), dtype))
        return kb.finish([kb.emit("mul", [x, x], {})])

    assert runtime.declines(one(DType.f32), CompileOptions(target="trn2")) == ""
    reason = runtime.declines(one(DType.f64), CompileOptions(target="trn2"))
    assert reason.startswith("neuronx-cc for trn2 (native int64) does not take multiply on f64")


def test_doctor_names_the_profile_in_use(capsys, monkeypatch):
    """On a build box (no Neuron device, no compiler) the doctor still says what nrt kernels would
    be compiled for, and with which flags."""
    from pathlib import Path

    from nkipy_cli import run

    from nkipy_runtime import neuronx_cc

    monkeypatch.delenv("NKIPY_NEURON_INT64", raising=False)
    monkeypatch.delenv("NKIPY_NEURON_F64", raising=False)
    monkeypatch.setenv("NKIPY_TARGET", "trn2")
    _, out, _ = run(capsys, "doctor")
    assert (
        "Runtime 'nrt': Neuron profile trn2 (native int64): kernels are checked against its rules "
        "before neuronx-cc runs with --native-int64=enabled --implicit-integer-downcast=none"
    ) in out
    monkeypatch.delenv("NKIPY_TARGET")
    monkeypatch.setattr(neuronx_cc, "DMI_PRODUCT_NAME", Path("/nonexistent"))  # not a Trainium
    _, out, _ = run(capsys, "doctor")
    assert "Runtime 'nrt': Neuron profile: none yet (cannot tell which Trainium generation" in out


def test_audit_counts_the_violations_of_a_kernel_cache(tmp_path, capsys):
    from nkipy_runtime.neuron.audit import main

    for name, text in (("a", BROKEN["u64-value"]), ("b", module("ROOT %c = f32[] constant(1)"))):
        artifacts = tmp_path / "kernels" / name / "artifacts"
        artifacts.mkdir(parents=True)
        (artifacts / "hlo.txt").write_text(text)
    assert main([str(tmp_path), "--target", "trn1"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "trn1 (32-bit int64): 2 violating instruction(s) in 1 of 2 module(s)"
    assert sorted(line.split() for line in out[1:]) == [
        ["1", "u64-value", "multiply", "on", "u64"],
        ["1", "u64-value", "parameter", "on", "u64"],
    ]
    assert main([str(tmp_path), "--target", "trn2"]) == 0  # native 64-bit integers take u64
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--target", "trn1", "--int64", "native"])
    assert "trn1 has no 64-bit integers" in capsys.readouterr().err


def test_every_profile_setting_that_changes_the_hlo_is_in_the_cache_key(monkeypatch):
    monkeypatch.delenv("NKIPY_NEURON_INT64", raising=False)
    monkeypatch.delenv("NKIPY_NEURON_F64", raising=False)
    runtime, options = NrtRuntime(), CompileOptions(target="trn2")
    tags = {runtime.cache_tag(options)}
    monkeypatch.setenv("NKIPY_NEURON_INT64", "32")
    tags.add(runtime.cache_tag(options))
    monkeypatch.setenv("NKIPY_NEURON_F64", "f32")
    tags.add(runtime.cache_tag(options))
    assert tags == {"trn2-int64", "trn2-int32", "trn2-int32-f64as32"}


def test_long_tuples_are_read_and_an_unreadable_line_is_an_error():
    """XLA numbers the elements of a long tuple type (``/*index=5*/``); every instruction must
    still be read, and a line the reader does not understand stops the check."""
    from nkipy_runtime.hlo_files import HLO_TEXT, hlo_artifacts
    from nkipy_runtime.neuron.hlo_text import HloTextError

    kb = KernelBuilder("seven")
    x = kb.param(TensorType((4,), DType.f64))
    text = hlo_artifacts(kb.finish([kb.emit("neg", [x], {}) for _ in range(7)]))[HLO_TEXT].decode()
    assert "/*index=5*/" in text
    (root,) = [i for i in parse(text).instructions() if i.root]
    assert root.opcode == "tuple" and root.types == ("f64",) * 7
    assert "tuple" in {v.opcode for v in violations(text, TRN1)}
    with pytest.raises(HloTextError, match="cannot read this line of HLO text: 'garbage here'"):
        parse(module("%p = f32[4]{0} parameter(0)\ngarbage here"))
