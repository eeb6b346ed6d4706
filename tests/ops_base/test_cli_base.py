"""`nkipy-ops` against the real nkipy-ops-base installation (tox `base` environment)."""

import re
from importlib.metadata import version

import pytest
import torch
from fresh_python import python
from nkipy_cli import by, line_of, run, run_json, section

from nkipy_core.plugin import manager as plugins
from nkipy_core.plugin.registry import resolve_op

BASE_VERSION = version("nkipy-ops-base")


@pytest.fixture
def installed_plugins():
    """The plugins actually installed in this environment, rebuilt before and after."""
    plugins.reload()
    yield plugins.get()
    plugins.reload()


def test_installed_base_pack_lowers_add_tensor(installed_plugins, capsys):
    code, out, err = run(capsys, "list")
    assert code == 0, err
    row = line_of(out, "aten::add.Tensor ")
    assert row[1:4] == ["nkipy-ops-base", BASE_VERSION, "0"]
    assert row[5].startswith("nkipy_ops_base/") and re.search(r"\.py:\d+$", row[5])

    add = by(run_json(capsys, "list")["lowerings"], "op", "aten::add.Tensor")
    assert (add["provider"], add["version"], add["plugin"]) == (
        "nkipy-ops-base",
        BASE_VERSION,
        "nkipy_ops_base",
    )
    assert add["qualname"].startswith("nkipy_ops_base.")


def test_installed_base_pack_filter_and_coverage(installed_plugins, capsys):
    dashed = run_json(capsys, "list", "--pack", "nkipy-ops-base")["lowerings"]
    underscored = run_json(capsys, "list", "--pack", "nkipy_ops_base")["lowerings"]
    assert dashed == underscored and "aten::add.Tensor" in [r["op"] for r in dashed]
    assert all(
        "nkipy-ops-base" in [r["provider"], *(o["provider"] for o in r["overridden"])]
        for r in dashed
    )
    assert run_json(capsys, "list", "--pack", "nkipy-core")["lowerings"] == []

    report = run_json(capsys, "list", "--coverage", "core-aten", "--pack", "nkipy_ops_base")
    base_core = [r["op"] for r in dashed if torch.Tag.core in resolve_op(r["op"]).tags]
    assert report["covered"] == len(base_core)
    assert report["covered"] + len(report["excluded"]) + len(report["missing"]) == report["total"]


#: core ATen overloads being lowered elsewhere (random bits); everything else is lowered or excluded
RANDOM = {"aten::rand.default", "aten::randn.default", "aten::randperm.default"}
#: excluded overload -> the category its reason must name
EXCLUDED = {
    "aten::sym_size.int": "symbolic-size query",
    "aten::sym_stride.int": "symbolic-size query",
    "aten::sym_numel.default": "symbolic-size query",
    "aten::sym_storage_offset.default": "symbolic-size query",
    "aten::sym_is_contiguous.default": "symbolic-size query",
    "aten::nonzero.default": "data-dependent output shape",
    "aten::_local_scalar_dense.default": "data-dependent host value",
    "aten::resize_.default": "in-place storage resize",
}


def test_base_pack_lowers_every_core_aten_overload_but_the_excluded_ones(installed_plugins, capsys):
    report = run_json(capsys, "list", "--coverage", "core-aten")
    excluded = {e["op"]: e["reason"] for e in report["excluded"]}
    assert set(report["missing"]) <= RANDOM
    assert excluded.keys() == EXCLUDED.keys()
    for op, category in EXCLUDED.items():
        assert excluded[op].startswith(category + ": ") and len(excluded[op]) > len(category) + 20

    code, out, err = run(capsys, "list", "--coverage", "core-aten")
    assert code == 0, err
    assert f"excluded ({len(EXCLUDED)}), not lowerable by design:" in out
    assert re.search(
        r"^  aten::nonzero\.default +data-dependent output shape: its size depends on the values",
        out,
        re.M,
    )


def test_coverage_lists_what_the_base_pack_leaves_on_cpu(installed_plugins, capsys):
    stays = run_json(capsys, "list", "--coverage", "core-aten")["stays_on_cpu"]
    by_op = {e["op"]: e for e in stays}
    assert {e["provider"] for e in stays} == {"nkipy-ops-base"}
    assert by_op["aten::linalg_eig.default"]["lowered_otherwise"] is False
    assert "linalg.eigh" in by_op["aten::linalg_eig.default"]["reason"]
    assert by_op["aten::as_strided.default"]["lowered_otherwise"] is True
    assert "storage_offset on a graph input" in by_op["aten::as_strided.default"]["reason"]

    code, out, err = run(capsys, "list", "--coverage", "core-aten")
    assert code == 0, err
    assert f"stays on CPU ({len(stays)}), as the packs say" in out
    assert re.search(r"^  aten::as_strided\.default\* +with an explicit storage_offset", out, re.M)
    assert re.search(r"^  aten::igamma\.default +torch's series .*\(nkipy-ops-base\)$", out, re.M)


EAGER_PROGRAM = """
import sys, torch, nkipy_core
nkipy_core.init_nkipy_backend(runtime="cpu", nkipy_cache=sys.argv[1])
x = torch.arange(8.0).to("nkipy")
y = (x * 2).exp().sum()
print(y.item())                        # a value on the host: the queue runs
z = torch.nonzero(x)  # data-dependent shape, never lowered: one by one, on CPU
torch.nkipy.synchronize()
"""


def test_stats_says_what_eager_fusion_did(tmp_path, capsys):
    cache = tmp_path / "cache"
    done = python(EAGER_PROGRAM, str(cache), RANK=None, WORLD_SIZE=None)
    assert done.returncode == 0, done.stderr
    code, out, err = run(capsys, "stats", str(cache))
    assert code == 0, err
    head = next(line for line in out.splitlines() if line.startswith("Eager fusion:"))
    flushes = int(re.search(r"(\d+) flushes", head).group(1))
    ops = int(re.search(r"of (\d+) queued ops", head).group(1))
    assert flushes >= 1 and ops >= 3, head  # mul, exp and sum at least
    reasons = {
        row.split("  ")[0].strip() for row in section(out, "Why the queue ran").splitlines()[2:]
    }
    assert "a value is used outside the queue" in reasons, out
    per_op = section(out, "Ops run one by one")
    assert "aten::nonzero.default" in per_op, out
    report = run_json(capsys, "stats", str(cache))
    assert report["eager"]["eager_flushes"] == flushes
    assert report["eager"]["eager_per_op:aten::nonzero.default"] == 1
