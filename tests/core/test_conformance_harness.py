"""The conformance harness itself, on an in-process pack with known-good and known-bad rules."""

import pytest
import torch
from fixture_packs import pack

from nkipy_core import RuleSet, Unsupported, knp
from nkipy_core.testing import (
    ConformanceReport,
    ExpectedFailures,
    OpResult,
    assert_conformance,
    conformance_cases,
    expected_failures_for,
    families,
    lowered_ops,
    run_conformance,
    run_sweep,
)
from nkipy_core.testing.sweep import family

aten = torch.ops.aten
DIST = "conformance-test-pack"


def _rules() -> RuleSet:
    rules = RuleSet()

    @rules.register(aten.neg.default)
    def neg(ctx, x):  # correct
        return knp.negative(x)

    @rules.register(aten.exp.default)
    def exp(ctx, x):  # deliberately wrong
        return knp.exp(x) + 1

    @rules.register(aten.sin.default)
    def sin(ctx, x):  # always declines: the op runs on CPU
        raise Unsupported("this pack only lowers sin on Tuesdays")

    @rules.register(aten.cos.default)
    def cos(ctx, x):  # buggy: raises instead of declining
        raise RuntimeError("forgot to implement cos")

    @rules.register(aten.sigmoid_backward.default)
    def sigmoid_backward(ctx, grad, y):  # correct, only reachable through backward
        return grad * y * (1 - y)

    return rules


@pytest.fixture
def test_pack(plugin_env):
    plugin_env.add(pack(_rules()), "conformance-test", DIST, "1.0")
    return DIST


def test_cases_map_lowered_overloads_to_opinfos(test_pack):
    assert lowered_ops(test_pack) == [
        "aten::cos.default",
        "aten::exp.default",
        "aten::neg.default",
        "aten::sigmoid_backward.default",
        "aten::sin.default",
    ]
    cases = {c.name: c for c in conformance_cases(test_pack)}
    assert {"neg", "exp", "sin", "cos", "sigmoid"} <= set(cases)
    assert cases["neg"].targets == ("aten::neg.default",)
    assert cases["sigmoid"].backward_only  # sigmoid_backward only shows up in backward graphs
    assert not cases["exp"].backward_only
    assert [c.name for c in conformance_cases(test_pack, include={"exp"})] == ["exp"]


def test_unknown_distribution_is_a_clear_error(test_pack):
    with pytest.raises(ValueError, match="no loaded plugin named 'nope'.*conformance-test-pack"):
        lowered_ops("nope")


def test_classifies_pass_fail_fallback_and_backward_only(test_pack):
    report = run_conformance(test_pack, max_samples=1, backward={"neg"}, backward_samples=1)
    rows = {r.op: r for r in report.rows}
    print(report.table())

    assert rows["neg"].status == "pass", rows["neg"]
    assert rows["neg"].lowered == ("aten::neg.default",)
    assert rows["neg"].backward_checked and rows["neg"].bwd == "1/1"

    assert rows["exp"].status == "fail"
    assert "fwd output" in rows["exp"].note and "not close" in rows["exp"].note
    assert not rows["exp"].backward_checked

    assert rows["sin"].status == "fallback"
    assert "aten::sin.default" in rows["sin"].note and "Tuesdays" in rows["sin"].note

    assert rows["cos"].status == "fail"
    assert "rule raised" in rows["cos"].note and "forgot to implement cos" in rows["cos"].note

    assert rows["sigmoid"].status == "pass", rows["sigmoid"]
    assert rows["sigmoid"].lowered == ("aten::sigmoid_backward.default",)
    assert rows["sigmoid"].backward_checked  # forced: the target only occurs in backward

    assert report.summary() == {"pass": 2, "fallback": 1, "fail": 2, "skip": 0}
    assert report.verified_ops() == ["aten::neg.default", "aten::sigmoid_backward.default"]

    table = report.table()
    header = table.splitlines()[0].split()
    assert header == ["op", "dtype", "status", "samples", "fwd", "bwd", "note"]
    assert "2 pass, 1 fallback, 2 fail, 0 skip" in table.splitlines()[-1]

    with pytest.raises(AssertionError, match=r"2 conformance row\(s\) not acceptable") as info:
        assert_conformance(report)
    assert "exp" in str(info.value) and "cos" in str(info.value)
    assert (
        rows["exp"].failed_samples[0][0] == "0" and "not close" in rows["exp"].failed_samples[0][1]
    )
    assert rows["exp"].checked_samples == ("0",)
    both = ExpectedFailures.parse("exp float32 0 off by one\ncos float32 0 raises\n")
    assert_conformance(report, expected_failures=both)
    with pytest.raises(AssertionError, match="sin"):
        assert_conformance(report, allow_fallback=False, expected_failures=both)
    stale = ExpectedFailures.parse(
        both.format() + "neg float32 0 fixed since\ngone float32 0 renamed\n"
    )
    with pytest.raises(AssertionError) as info:
        assert_conformance(report, expected_failures=stale)
    assert str(info.value).splitlines() == [
        "2 expected failure(s) that no longer fail (remove the lines):",
        "  gone float32 0: the run has no row gone [float32]",
        "  neg float32 0: passes now (listed as: fixed since)",
        "Fix the failures, or rewrite the file from this run with NKIPY_UPDATE_EXPECTED_FAILURES=1 and review the diff.",
    ]


def test_explicit_ops_without_a_rule_fall_back_and_ops_without_opinfo_skip(plugin_env):
    report = run_conformance(
        ["aten::tanh.default", "aten::_pdist_forward.default"], max_samples=1, backward=False
    )
    rows = {r.op: r for r in report.rows}
    assert rows["tanh"].status == "fallback"
    assert "no installed pack lowers it" in rows["tanh"].note
    assert rows["aten::_pdist_forward.default"].status == "skip"
    assert "no OpInfo covers" in rows["aten::_pdist_forward.default"].note
    assert isinstance(report, ConformanceReport) and report.failures() == []


def test_random_samples_are_compared_by_shape_and_dtype_and_the_row_says_so(plugin_env):
    """Compiled random numbers are not eager's: a random op's row passes on shapes and dtypes
    (its values are tested statistically elsewhere) and its note says so; a wrong dtype fails."""
    rules = RuleSet()

    @rules.register(aten.bernoulli.default)
    def bernoulli(ctx, p, *, generator=None):
        return knp.astype(knp.less(ctx.random_bits(p.shape), 2**31), ctx.out_dtype)

    @rules.register(aten.randn_like.default)
    def randn_like(ctx, x, **_):  # the node's type is checked by the core: int32 is refused
        return knp.astype(ctx.random_bits(x.shape), torch.int32)

    plugin_env.add(pack(rules), "random-test", "random-test-pack", "1.0")
    report = run_conformance(
        "random-test-pack", max_samples=1, backward=False, include={"bernoulli", "randn_like"}
    )
    rows = {r.op: r for r in report.rows}
    assert rows["bernoulli"].status == "pass", rows["bernoulli"]
    assert "compared by shape and dtype only" in rows["bernoulli"].note
    assert rows["randn_like"].status == "fail", rows["randn_like"]


def _row(op, dtype, checked, failed=()):
    return OpResult(
        op, dtype, "fail" if failed else "pass", (), checked_samples=checked, failed_samples=failed
    )


def test_expected_failures_file_is_rewritten_from_a_run_keeping_reasons(tmp_path, monkeypatch):
    path = tmp_path / "expected.txt"
    path.write_text(
        "# header comment, kept\n"
        "sort float32 1 ties in stable order\n"
        "topk float32 0:grad fixed by now\n"
        "topk float32 3 not run this time (time budget)\n"
        "sort bfloat16 1 another dtype, not judged\n"
    )
    report = ConformanceReport(
        (
            _row("sort", "float32", ("0", "1"), (("1", "fwd output: not close"),)),
            _row("topk", "float32", ("0:grad", "1")),
            _row("cumsum", "float32", ("0",), (("0", "fwd raised ValueError: boom"),)),
        )
    )
    with pytest.raises(AssertionError) as info:
        assert_conformance(report, expected_failures=expected_failures_for(report, path))
    assert "cumsum float32 0: fwd raised ValueError: boom" in str(info.value)
    assert "topk float32 0:grad: passes now (listed as: fixed by now)" in str(info.value)

    monkeypatch.setenv("NKIPY_UPDATE_EXPECTED_FAILURES", "1")
    assert_conformance(report, expected_failures=expected_failures_for(report, path))
    assert path.read_text() == (
        "# header comment, kept\n"
        "cumsum  float32   0  fwd raised ValueError: boom\n"
        "sort    bfloat16  1  another dtype, not judged\n"
        "sort    float32   1  ties in stable order\n"
        "topk    float32   3  not run this time (time budget)\n"
    )
    assert ExpectedFailures.read(path) == ExpectedFailures.parse(path.read_text())


@pytest.mark.parametrize("line", ["sort float32 1", "sort float32 1 a\nsort float32 1 b"])
def test_malformed_expected_failures_name_the_line(line):
    with pytest.raises(ValueError, match=r"<expected failures>:[12]: "):
        ExpectedFailures.parse(line)


def test_the_sweep_holds_every_op_of_the_graphs_to_strict_mode(test_pack):
    report = run_sweep(include={"neg", "exp", "sin", "abs", "view_as_real"}, backward=False)
    rows = {r.op: r for r in report.rows}
    print(report.table())
    assert rows["neg"].status == "pass", rows["neg"]
    assert rows["exp"].status == "fail" and "not close" in rows["exp"].note
    # strict: an op left on CPU (declined, or lowered by no pack) is an error naming it
    assert rows["sin"].status == "fail" and "aten::sin.default" in rows["sin"].note
    assert rows["abs"].status == "fail" and "aten::abs.default" in rows["abs"].note
    # a complex-only OpInfo runs at complex64
    assert rows["view_as_real"].dtype == "complex64"
    assert families(report)["complex"] == {"pass": 0, "fallback": 0, "fail": 1, "skip": 0}
    assert families(report)["other"]["pass"] == 1


def test_families_of_opinfo_names():
    assert [
        family(n)
        for n in (
            "linalg.svd",
            "cholesky",
            "fft.rfft2",
            "stft",
            "special.bessel_j0",
            "polygamma.polygamma_n_1",
            "view_as_complex",
            "add",
        )
    ] == ["linalg", "linalg", "fft", "fft", "special", "special", "complex", "other"]
