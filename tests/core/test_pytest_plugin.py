"""The pytest plugin: a pack's suite gets OpInfo conformance in one line, judged against the
pack's expected-failures file. Each case runs pytest in a subprocess on a tiny pack that a
conftest registers in-process (as a pack's own tests do before it is installed)."""

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
import torch
from nkipy_core import RuleSet, hookimpl, knp, plugins

def make_pack(name, op, rule):
    rules = RuleSet(priority=50)  # above nkipy-ops-base, where it is installed
    rules.register(op)(rule)

    class Pack:
        @hookimpl
        def nkipy_register_lowerings(registry):
            rules.install(registry)

    plugins.register(Pack, name=name, distribution=name, version="0.1")

make_pack("good-pack", torch.ops.aten.exp.default, lambda ctx, x: knp.exp(x))
make_pack("wrong-pack", torch.ops.aten.sin.default, lambda ctx, x: knp.cos(x))  # what a buggy rule looks like
plugins.reload()
"""


@pytest.fixture
def packs(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.mkdir("tests")
    return pytester


def test_the_option_the_ini_line_and_the_fixture_add_conformance_tests_judged_on_eager(packs):
    packs.makeini("[pytest]\nnkipy_conformance = good-pack\n")
    packs.makepyfile(
        test_pack="""
        def test_conformance(nkipy_conformance):
            nkipy_conformance("good-pack", dtypes=("float32",), samples=1)

        def test_a_pack_that_is_not_loaded_is_an_error(nkipy_conformance):
            nkipy_conformance("not-installed-pack", dtypes=("float32",), samples=1)
    """
    )
    result = packs.runpytest_subprocess(
        "-rA", "--nkipy-conformance=wrong-pack", "--nkipy-conformance-samples=1"
    )
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.fnmatch_lines_random(
        [
            "PASSED *test_pack.py::test_conformance*",
            "PASSED *nkipy-conformance[[]good-pack-float32[]]*",
            "PASSED *nkipy-conformance[[]good-pack-bfloat16[]]*",
            "FAILED *nkipy-conformance[[]wrong-pack-float32[]]*",
            "FAILED *nkipy-conformance[[]wrong-pack-bfloat16[]]*",
            "FAILED *test_pack.py::test_a_pack_that_is_not_loaded_is_an_error*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*wrong-pack (float32) does not conform:*",
            "*failing sample(s) not in the expected failures:*",
        ]
    )
    result.stdout.fnmatch_lines(["*sin *float32*"])
    result.stdout.fnmatch_lines(
        ["*no loaded plugin named 'not-installed-pack' registers lowering rules*"]
    )


def test_expected_failures_in_the_pack_make_a_known_failure_pass(packs, monkeypatch):
    monkeypatch.setenv("NKIPY_UPDATE_EXPECTED_FAILURES", "1")
    packs.runpytest_subprocess("--nkipy-conformance=wrong-pack", "--nkipy-conformance-samples=1")
    monkeypatch.delenv("NKIPY_UPDATE_EXPECTED_FAILURES")
    listed = (packs.path / "tests" / "conformance_expected_failures.txt").read_text()
    assert "sin" in listed and "float32" in listed and "bfloat16" in listed
    result = packs.runpytest_subprocess(
        "--nkipy-conformance=wrong-pack", "--nkipy-conformance-samples=1"
    )
    result.assert_outcomes(passed=2)
