"""The kernel cache is not a way in: planted code never runs, tampered entries are rebuilt,
unsafe directories are refused, shared tiers and archives count only when signed or pinned.

Each "host" is a fresh process with its own HOME (so its own sealing key), working directory and
rank; the cache directory is the default ``./nkipy_cache`` of that working directory unless a
test says otherwise.
"""

import collections
import json
import os
import stat
import subprocess
import sys
import textwrap
from hashlib import sha256
from pathlib import Path

import pytest

from nkipy_core.cache.kernel_cache import KernelCache
from nkipy_core.errors import UnsafeCacheError

HERE = Path(__file__).parent

# The user program of every host: the test pack, one compiled function (``sys.argv[1]`` picks
# which, so tests can make distinct kernels), its result checked against torch.
PROGRAM = textwrap.dedent("""
    import json, sys, warnings, torch
    sys.path.insert(0, {here!r})
    from fixture_packs import arithmetic_rules, pack
    from nkipy_core import cache_stats, plugins
    plugins.register(pack(arithmetic_rules(priority=1000)), "arith", "arith-pack", "1.0")
    plugins.reload()
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7
    fns = {{
        "a": lambda t: torch.exp(t) * t + 1,
        "b": lambda t: torch.exp(t) + t,
        "c": lambda t: t * t + t,
    }}
    fn = fns[sys.argv[1]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(fn, backend="nkipy")(x)
    ok = torch.allclose(out, fn(x))
    print(json.dumps({{"ok": ok, "warnings": [f"{{w.category.__name__}}: {{w.message}}" for w in caught], **cache_stats}}))
""").format(here=str(HERE))


class Host:
    """A machine of its own: home directory, working directory, rank."""

    def __init__(self, root: Path, name: str, rank: int = 0, **env: str):
        self.home = root / name / "home"
        self.cwd = root / name / "work"
        self.home.mkdir(parents=True)
        self.cwd.mkdir(parents=True)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("NKIPY_")},
            "HOME": str(self.home),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            # torch's own caches are per host too (their default is under /tmp)
            "TORCHINDUCTOR_CACHE_DIR": str(root / name / "torchinductor"),
            **env,
        }
        self.env.pop("XDG_CONFIG_HOME", None)

    @property
    def cache(self) -> Path:
        return self.cwd / "nkipy_cache"

    def _python(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def run(self, fn: str = "a") -> collections.Counter:
        proc = self._python("-c", PROGRAM, fn)
        assert proc.returncode == 0, proc.stderr
        stats = collections.Counter(json.loads(proc.stdout.strip().splitlines()[-1]))
        assert stats["ok"]
        return stats  # a counter: a count not in cache_stats is 0

    def fails(self, fn: str = "a") -> str:
        """The program's error output, which it must fail with."""
        proc = self._python("-c", PROGRAM, fn)
        assert proc.returncode != 0
        return proc.stderr

    def cli(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        proc = self._python("-m", "nkipy_core.cli.main", *args)
        if ok:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc


def entry_of(cache: Path) -> Path:
    (entry,) = (cache / "kernels").iterdir()
    return entry


def rewrite_checksums(entry: Path) -> None:
    """What an attacker who can write the cache does after changing files: fix the sums."""
    meta = json.loads((entry / "meta.json").read_text())
    meta["files"] = {n: sha256((entry / n).read_bytes()).hexdigest() for n in meta["files"]}
    (entry / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))


def test_planted_code_in_a_cache_entry_never_runs(tmp_path):
    host = Host(tmp_path, "h")
    assert host.run()["compiled_kernels"] == 1
    entry = entry_of(host.cache)
    marker = tmp_path / "PWNED"
    planted = [p for p in entry.rglob("*.py")] + [p for p in entry.rglob("*.ir")]
    assert planted
    for path in planted:
        path.write_text(f"open({str(marker)!r}, 'w').close()\n" + path.read_text())
    rewrite_checksums(entry)

    again = host.run()
    assert not marker.exists()
    assert again["untrusted"] == 1 and again["compiled_kernels"] == 1
    assert any(
        w.startswith("CacheTrustWarning") and "not sealed by your key" in w
        for w in again["warnings"]
    )
    # rebuilt: the next process trusts what it finds
    third = host.run()
    assert third["compiled_kernels"] == 0 and third["untrusted"] == 0


def test_tampered_artifact_is_rebuilt_never_run(tmp_path):
    host = Host(tmp_path, "h")
    host.run()
    entry = entry_of(host.cache)
    artifact = next((entry / "artifacts").iterdir())
    artifact.write_bytes(artifact.read_bytes() + b"\n# changed\n")
    stats = host.run()
    assert stats["corrupt"] == 1 and stats["compiled_kernels"] == 1


def test_an_index_file_redirected_to_another_kernel_is_refused(tmp_path):
    # torch's AOTAutograd cache would find the kernels by key, without the index
    host = Host(tmp_path, "h", TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    host.run("a")
    host.run("b")
    index = host.cache / "index"
    redirected = 0
    keys = sorted(p.name for p in (host.cache / "kernels").iterdir())
    for path in index.iterdir():
        stored = json.loads(path.read_text())
        if "kernel" in stored["value"]:
            other = next(k for k in keys if k != stored["value"]["kernel"])
            stored["value"]["kernel"] = other  # the seal stays the old one
            path.write_text(json.dumps(stored))
            redirected += 1
    assert redirected == 2
    stats = host.run("a")
    assert stats["untrusted"] >= 1 and stats["lowered_kernels"] == 1


def test_world_writable_root_is_refused_with_the_fix(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(
        UnsafeCacheError, match=r"can be written by everyone \(mode 0777\).*chmod go-w"
    ):
        KernelCache(root)
    root.chmod(0o700)
    KernelCache(root)
    (root / "kernels").chmod(0o775)
    with pytest.raises(UnsafeCacheError, match=r"kernels can be written by its group"):
        KernelCache(root)


def test_a_root_of_another_user_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    KernelCache(root)
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 4242)
    with pytest.raises(UnsafeCacheError, match=r"belongs to .*not to you.*NKIPY_CACHE_SHARED"):
        KernelCache(root)


def test_the_compiled_function_reports_an_unsafe_cache_as_a_typed_error(tmp_path):
    host = Host(tmp_path, "h")
    host.cache.mkdir()
    host.cache.chmod(0o777)
    error = host.fails()
    assert "UnsafeCacheError" in error and "chmod go-w" in error


def test_everything_created_is_private_whatever_the_umask(tmp_path):
    host = Host(tmp_path, "h", NKIPY_CACHE=str(tmp_path / "h" / "deep" / "er" / "cache"))
    old = os.umask(0)
    try:
        host.run()
    finally:
        os.umask(old)
    created = tmp_path / "h" / "deep"
    for path in [created, *created.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    key = host.home / ".config" / "nkipy" / "cache.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_a_key_file_others_can_read_is_refused(tmp_path):
    host = Host(tmp_path, "h")
    host.run()
    key = host.home / ".config" / "nkipy" / "cache.key"
    key.chmod(0o644)
    assert "chmod 600" in host.fails()


def keygen(host: Host, name: str) -> tuple[Path, str]:
    key = host.home / f"{name}.key"
    line = (
        host.cli("cache", "keygen", "--out", str(key), "--name", name)
        .stdout.strip()
        .splitlines()[-1]
    )
    assert line.startswith("ed25519 ") and line.endswith(f" {name}")
    return key, line


def test_two_hosts_share_an_exported_cache_and_the_second_compiles_nothing(tmp_path):
    build = Host(tmp_path, "build", rank=0)
    signing_key, public = keygen(build, "buildbox")
    build.env["NKIPY_CACHE_SIGNING_KEY"] = str(signing_key)
    assert build.run()["compiled_kernels"] == 1
    archive = tmp_path / "kernels.tar"
    out = build.cli("cache", "export", str(archive)).stdout
    assert "exported 1 entries" in out and "(signed)" in out

    trusted = tmp_path / "trusted_keys"
    trusted.write_text(f"# the build machine\n{public}\n")
    fleet = Host(tmp_path, "fleet", rank=3, NKIPY_CACHE_TRUSTED_KEYS=str(trusted))
    out = fleet.cli("cache", "import", str(archive)).stdout
    assert "imported 1 entries" in out and "0 refused" in out
    stats = fleet.run()
    assert stats["compiled_kernels"] == 0 and stats["hits"] >= 1
    # content-addressed: the same key on both hosts, whatever their homes, directories, ranks
    assert [p.name for p in (build.cache / "kernels").iterdir()] == [
        p.name for p in (fleet.cache / "kernels").iterdir()
    ]
    listing = fleet.cli("cache", "ls").stdout
    assert "sealed" in listing and "local" in listing


def shared_tier_reader(tmp_path: Path, name: str, shared: Path, trusted_key: str) -> Host:
    """A host reading ``shared`` as its shared tier, trusting one key."""
    trusted = tmp_path / f"{name}.trusted"
    trusted.write_text(trusted_key + "\n")
    return Host(
        tmp_path, name, NKIPY_CACHE_SHARED=str(shared), NKIPY_CACHE_TRUSTED_KEYS=str(trusted)
    )


def test_a_shared_tier_is_used_when_signed_by_a_trusted_key_and_not_otherwise(tmp_path):
    build = Host(tmp_path, "build")
    signing_key, public = keygen(build, "buildbox")
    build.env["NKIPY_CACHE_SIGNING_KEY"] = str(signing_key)
    build.run()
    fleet = shared_tier_reader(tmp_path, "fleet", build.cache, public)
    stats = fleet.run()
    assert stats["compiled_kernels"] == 0 and stats["shared_hits"] == 1
    assert "signed by buildbox" in fleet.cli("cache", "ls").stdout

    # a foreign signature: a key the fleet does not list
    _, other = keygen(Host(tmp_path, "attacker"), "attacker")
    stats = shared_tier_reader(tmp_path, "stranger", build.cache, other).run()
    assert stats["compiled_kernels"] == 1 and stats["untrusted"] >= 1
    assert any("CacheTrustWarning" in w for w in stats["warnings"])


def test_an_unsigned_export_is_trusted_through_its_pinned_digests(tmp_path):
    build = Host(tmp_path, "build")
    build.run()
    archive = tmp_path / "kernels.tar"
    assert "unsigned" in build.cli("cache", "export", str(archive)).stdout
    fleet = Host(tmp_path, "fleet")
    refused = fleet.cli("cache", "import", str(archive), ok=False)
    assert refused.returncode == 1 and "not signed by a trusted key" in refused.stdout
    fleet.env["NKIPY_CACHE_PINNED"] = str(archive) + ".digests"
    assert "imported 1 entries" in fleet.cli("cache", "import", str(archive)).stdout
    assert fleet.run()["compiled_kernels"] == 0


def test_an_archive_with_a_path_outside_the_cache_is_refused(tmp_path):
    import io
    import tarfile

    archive = tmp_path / "evil.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("../../escaped.py")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"boom"))
    host = Host(tmp_path, "h")
    proc = host.cli("cache", "import", str(archive), ok=False)
    assert proc.returncode == 2 and "unexpected member '../../escaped.py'" in proc.stderr
    assert not (tmp_path / "escaped.py").exists()


def test_verify_ls_stats_and_prune(tmp_path):
    host = Host(tmp_path, "h")
    for fn in "abc":
        host.run(fn)
    assert "3 of 3 entries verified" in host.cli("cache", "verify").stdout
    stats = json.loads(host.cli("cache", "stats", "--format", "json").stdout)
    assert stats["entries"] == 3 and stats["by_runtime"]["cpu"]["entries"] == 3

    first = sorted((host.cache / "kernels").iterdir(), key=lambda p: p.stat().st_mtime)[0]
    (first / "meta.json").write_text((first / "meta.json").read_text().replace('"cpu"', '"nrt"'))
    proc = host.cli("cache", "verify", ok=False)
    assert proc.returncode == 1 and f"untrusted: {first.name}" in proc.stdout
    assert "removed" in host.cli("cache", "verify", "--remove", ok=False).stdout
    assert "2 of 2 entries verified" in host.cli("cache", "verify").stdout

    out = host.cli("cache", "prune", "--older-than", "1d").stdout
    assert out.startswith("removed 0 entries")
    out = host.cli("cache", "prune", "--max-size", "1").stdout
    assert out.startswith("removed 2 entries") and "0 entries (0 bytes) left" in out


def test_a_size_limit_evicts_the_least_recently_used_entries(tmp_path):
    host = Host(tmp_path, "h")
    host.run("a")
    size = sum(f.stat().st_size for f in host.cache.joinpath("kernels").rglob("*") if f.is_file())
    host.env["NKIPY_CACHE_MAX_SIZE"] = str(int(size * 2.5))
    host.run("b")
    host.run("a")  # a hit: "a" is now more recent than "b"
    stats = host.run("c")
    assert stats["evicted"] == 1
    # "b" went: "a" and "c" are hits, "b" compiles again
    assert host.run("a")["compiled_kernels"] == 0
    assert host.run("b")["compiled_kernels"] == 1


def test_an_unreadable_key_directory_still_compiles_with_a_process_key(tmp_path):
    host = Host(tmp_path, "h", NKIPY_CACHE_KEY="/proc/nkipy-cannot-be-created/cache.key")
    stats = host.run()
    assert stats["compiled_kernels"] == 1
    assert any("key of its own" in w for w in stats["warnings"])
    assert host.run()["compiled_kernels"] == 1  # the next process cannot trust it


def test_a_bad_trusted_keys_file_says_what_a_line_should_be(tmp_path):
    from nkipy_core.cache import trust
    from nkipy_core.errors import ConfigurationError

    bad = tmp_path / "keys"
    bad.write_text("ssh-rsa AAAA me\n")
    with pytest.raises(ConfigurationError, match=r"keys:1: expected `ed25519 <64 hex digits>"):
        trust.parse_keys(bad.read_text(), str(bad))
