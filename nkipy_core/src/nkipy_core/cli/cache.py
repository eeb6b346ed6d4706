"""``nkipy-ops cache``: look after a kernel cache and move it between machines.

``ls``, ``stats`` and ``verify`` read a cache (the local root and the shared tiers); ``prune``
removes entries by age or to fit a size; ``export FILE.tar`` packs the trusted entries, signed
with ``NKIPY_CACHE_SIGNING_KEY`` if it is set, with their digests beside it (``FILE.tar.digests``,
a pin list); ``import FILE.tar`` installs the entries of an archive that are signed by a trusted
key or pinned, sealed for this user, and refuses the rest; ``keygen`` makes a build machine's
signing key. So a build box compiles (``nkipy-ops precompile``), exports, and a fleet imports
or mounts the export as a shared tier, and compiles nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import tarfile
import time
from pathlib import Path
from typing import Any

from nkipy_core.cache import trust
from nkipy_core.cache.kernel_cache import (
    STATS,
    KernelCache,
    Untrusted,
    checked_files,
    read_entry,
    shared_tiers,
    vouched_meta,
)
from nkipy_core.cli.command import EXIT_OK, UsageError, cache_dir
from nkipy_core.cli.format import emit, format_table, table_section
from nkipy_core.config import env
from nkipy_core.config.env import parse_bytes

#: exit code of ``verify`` and ``import`` when an entry was bad or refused
EXIT_BAD_ENTRIES = 1

#: the one file of an archive that is not an entry's: what it holds, written by ``export``
ARCHIVE_INDEX = "nkipy-cache-export.json"
_MEMBER = re.compile(r"kernels/([0-9a-f]{64})/((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_.-]+)")
#: the largest member ``import`` reads (a NEFF of a large model is well below it)
MAX_MEMBER_BYTES = 4 << 30

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """Seconds from ``"3600"``, ``"90m"``, ``"12h"``, ``"7d"``, ``"2w"``."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise UsageError(
            f"--older-than takes a duration such as 3600, 90m, 12h, 7d or 2w, not {text!r}"
        )
    return float(match.group(1)) * _SECONDS[match.group(2)]


def _entry_row(path: Path, tier: str, sealed_ok: bool, size: int | None = None) -> dict[str, Any]:
    """What ``ls`` and ``verify`` say about one entry directory (``size``: its bytes, if known)."""
    if size is None:
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    row: dict[str, Any] = {
        "key": path.name,
        "tier": tier,
        "bytes": size,
        "last_used": path.stat().st_mtime,
    }
    try:
        meta, _, why = read_entry(path, sealed_ok)
        row.update(name=meta.get("name"), runtime=meta.get("runtime"), status="ok", trust=why)
    except Untrusted:
        row.update(name=None, runtime=None, status="untrusted", trust="none")
    except (OSError, ValueError, KeyError) as exc:
        row.update(name=None, runtime=None, status="corrupt", trust=f"{type(exc).__name__}: {exc}")
    return row


def _rows(root: Path) -> list[dict[str, Any]]:
    cache = KernelCache(root)
    rows = [_entry_row(e.path, "local", True, e.size) for e in cache.entries()]
    for tier in shared_tiers():
        for entry in sorted((tier / "kernels").glob("*")):
            rows.append(_entry_row(entry, str(tier), False))
    return rows


def _ago(seconds_since_epoch: float) -> str:
    age = max(time.time() - seconds_since_epoch, 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if age >= size:
            return f"{age / size:.0f}{unit} ago"
    return f"{age:.0f}s ago"


def cmd_ls(args: argparse.Namespace) -> int:
    rows = _rows(cache_dir(args.cache))
    cells = [
        (
            r["key"][:16],
            r["name"] or "-",
            r["runtime"] or "-",
            r["bytes"],
            _ago(r["last_used"]),
            r["trust"] if r["status"] == "ok" else r["status"],
            r["tier"],
        )
        for r in rows
    ]
    headers = ["key", "name", "runtime", "bytes", "last used", "trusted", "tier"]
    emit(rows, table_section("Kernel cache entries", "no entries", headers, cells), args.format)
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    root = cache_dir(args.cache)
    rows = _rows(root)
    local = [r for r in rows if r["tier"] == "local"]
    by_runtime: dict[str, list[int]] = {}
    for r in local:
        count_bytes = by_runtime.setdefault(r["runtime"] or "-", [0, 0])
        count_bytes[0] += 1
        count_bytes[1] += r["bytes"]
    limit = env.NKIPY_CACHE_MAX_SIZE.get()
    report = {
        "cache": str(root),
        "entries": len(local),
        "bytes": sum(r["bytes"] for r in local),
        "max_bytes": limit,
        "by_runtime": {k: {"entries": v[0], "bytes": v[1]} for k, v in sorted(by_runtime.items())},
        "bad": sum(r["status"] != "ok" for r in local),
        "shared_tiers": [
            {"path": str(t), "entries": sum(r["tier"] == str(t) for r in rows)}
            for t in shared_tiers()
        ],
    }
    lines = [
        f"Kernel cache {root}: {report['entries']} entries, {report['bytes']} bytes"
        + (f" (limit {limit})" if limit else " (no size limit)"),
        format_table(
            ["runtime", "entries", "bytes"],
            [(k, v["entries"], v["bytes"]) for k, v in report["by_runtime"].items()],
        ),
        f"entries not usable (untrusted or corrupt): {report['bad']}",
    ]
    lines += [f"shared tier {t['path']}: {t['entries']} entries" for t in report["shared_tiers"]]
    emit(report, "\n".join(lines), args.format)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every entry's checksums and seal, signature or pin; with ``--remove``, remove
    the local entries that fail (shared tiers are never changed)."""
    root = cache_dir(args.cache)
    rows = _rows(root)
    bad = [r for r in rows if r["status"] != "ok"]
    if args.remove:
        cache = KernelCache(root)
        for r in bad:
            if r["tier"] == "local":
                cache.remove(r["key"])
                r["removed"] = True
    lines = [f"{len(rows) - len(bad)} of {len(rows)} entries verified"]
    lines += [
        f"  {r['status']}: {r['key']} ({r['tier']}) {r['trust'] if r['status'] == 'corrupt' else ''}"
        + (" - removed" if r.get("removed") else "")
        for r in bad
    ]
    emit({"verified": len(rows) - len(bad), "bad": bad}, "\n".join(lines), args.format)
    return EXIT_BAD_ENTRIES if bad else EXIT_OK


def cmd_prune(args: argparse.Namespace) -> int:
    if args.max_size is None and args.older_than is None:
        raise UsageError("give --max-size SIZE and/or --older-than DURATION")
    max_bytes = _size(args.max_size) if args.max_size is not None else None
    older = parse_duration(args.older_than) if args.older_than is not None else None
    cache = KernelCache(cache_dir(args.cache))
    removed = cache.prune(max_bytes=max_bytes, older_than=older)
    left = cache.entries()
    report = {
        "removed": len(removed),
        "removed_bytes": sum(e.size for e in removed),
        "entries": len(left),
        "bytes": sum(e.size for e in left),
    }
    text = (
        f"removed {report['removed']} entries ({report['removed_bytes']} bytes); "
        f"{report['entries']} entries ({report['bytes']} bytes) left"
    )
    emit(report, text, args.format)
    return EXIT_OK


def _size(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError:
        raise UsageError(f"--max-size takes a size such as 500MB or 20GiB, not {text!r}") from None


def cmd_export(args: argparse.Namespace) -> int:
    """Pack the local entries this user trusts, each signed with the signing key if one is set;
    write the archive's pin list beside it."""
    cache = KernelCache(cache_dir(args.cache))
    out = Path(args.file)
    exported: dict[str, str] = {}
    skipped = 0
    with tarfile.open(out, "w:gz" if out.name.endswith(".gz") else "w") as archive:
        for info in cache.entries():
            try:
                read_entry(info.path, sealed_ok=True)
            except (Untrusted, OSError, ValueError, KeyError):
                skipped += 1
                continue
            meta = (info.path / "meta.json").read_bytes()
            content = json.loads((info.path / trust.SEAL_FILE).read_bytes())
            signatures = [s for s in content.get("signatures", []) if isinstance(s, dict)]
            mine = trust.sign(meta)
            if mine is not None:
                signatures = [s for s in signatures if s.get("key") != mine["key"]] + [mine]
            _add(archive, f"kernels/{info.key}/meta.json", meta)
            _add(
                archive,
                f"kernels/{info.key}/{trust.SEAL_FILE}",
                json.dumps({"signatures": signatures}).encode(),
            )
            for name in json.loads(meta)["files"]:
                _add(archive, f"kernels/{info.key}/{name}", (info.path / name).read_bytes())
            exported[info.key] = trust.entry_digest(meta)
        _add(archive, ARCHIVE_INDEX, json.dumps({"entries": exported}, indent=2).encode())
    digests = out.with_name(out.name + ".digests")
    digests.write_text("".join(f"{d}  # {k}\n" for k, d in sorted(exported.items())))
    signed = env.NKIPY_CACHE_SIGNING_KEY.get() is not None
    report = {
        "file": str(out),
        "entries": len(exported),
        "skipped_untrusted": skipped,
        "signed": signed,
        "digests": str(digests),
    }
    text = (
        f"exported {len(exported)} entries to {out}"
        + (" (signed)" if signed else " (unsigned: trusted where its digests are pinned)")
        + f"; digests in {digests}"
        + (f"; {skipped} untrusted or corrupt entries left out" if skipped else "")
    )
    emit(report, text, args.format)
    return EXIT_OK


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(data)
    member.mode = 0o600
    member.mtime = int(time.time())
    archive.addfile(member, io.BytesIO(data))


def _read_archive(path: Path) -> dict[str, dict[str, bytes]]:
    """The entries of an archive as {key: {relative name: bytes}}; only regular files under
    ``kernels/<key>/`` with plain names are read (no links, no ``..``, no absolute paths), so
    nothing is written where the archive says: ``import`` writes what it verified itself."""
    entries: dict[str, dict[str, bytes]] = {}
    with tarfile.open(path) as archive:
        for member in archive:
            if member.name == ARCHIVE_INDEX or member.isdir():
                continue
            match = _MEMBER.fullmatch(member.name)
            if match is None or not member.isfile() or ".." in member.name.split("/"):
                raise UsageError(
                    f"{path} is not a kernel cache export: unexpected member {member.name!r}"
                )
            if member.size > MAX_MEMBER_BYTES:
                raise UsageError(
                    f"{path}: member {member.name} is larger than {MAX_MEMBER_BYTES} bytes"
                )
            data = archive.extractfile(member)
            assert data is not None  # a regular file
            entries.setdefault(match.group(1), {})[match.group(2)] = data.read()
    return entries


def cmd_import(args: argparse.Namespace) -> int:
    """Install the archive's entries that are signed by a trusted key or pinned (``trust``),
    checked like a shared tier's, then sealed for this user; refuse the others."""
    cache = KernelCache(cache_dir(args.cache))
    if not cache.writable:
        raise UsageError(f"the kernel cache {cache.root} cannot be written")
    installed, present, refused = [], [], []
    for key, files in sorted(_read_archive(Path(args.file)).items()):
        meta = files.pop("meta.json", b"")
        seal_text = files.pop(trust.SEAL_FILE, None)
        reason = None
        try:
            if not meta:
                raise ValueError("it has no meta.json")
            listed, why = vouched_meta(key, meta, seal_text, sealed_ok=False)
            if set(listed["files"]) != set(files):
                raise ValueError("its files are not those its metadata lists")
            checked_files(listed, files.__getitem__)
        except (Untrusted, ValueError) as exc:
            reason = str(exc)
        if reason is not None:
            STATS["untrusted"] += 1
            refused.append({"key": key, "reason": reason})
            continue
        if cache.entry_dir(key).exists():
            present.append(key)
            continue
        content = json.loads(seal_text or b"{}")  # verdict read it: JSON
        cache.install(key, files, meta, {**content, "mac": trust.seal(meta)})
        installed.append({"key": key, "trust": why})
    report = {"installed": installed, "already_present": len(present), "refused": refused}
    lines = [
        f"imported {len(installed)} entries into {cache.root}; {len(present)} already there; "
        f"{len(refused)} refused"
    ]
    lines += [f"  refused {r['key'][:16]}: {r['reason']}" for r in refused]
    emit(report, "\n".join(lines), args.format)
    return EXIT_BAD_ENTRIES if refused else EXIT_OK


def cmd_keygen(args: argparse.Namespace) -> int:
    path = Path(args.out).expanduser()
    if path.exists():
        raise UsageError(f"{path} exists; nkipy-ops cache keygen never replaces a key")
    public = trust.generate_signing_key(path, args.name)
    report = {"private_key": str(path), "public_key": public.line()}
    text = (
        f"wrote the private key to {path} (set NKIPY_CACHE_SIGNING_KEY={path} where kernels "
        "are compiled or exported). Add this line to NKIPY_CACHE_TRUSTED_KEYS on the hosts "
        f"that use them:\n{public.line()}"
    )
    emit(report, text, args.format)
    return EXIT_OK


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``nkipy-ops cache`` and its subcommands."""
    cache = commands.add_parser(
        "cache",
        help="list, check, prune, export and import the kernel cache",
        description="Look after the kernel cache (the local directory and the shared tiers of "
        "NKIPY_CACHE_SHARED) and move kernels between machines with signed archives.",
    )
    subs = cache.add_subparsers(dest="cache_command", required=True, metavar="COMMAND")

    def sub(
        name: str, handler: Any, help_text: str, on_cache: bool = True
    ) -> argparse.ArgumentParser:
        parser = subs.add_parser(name, parents=[common], help=help_text, description=help_text)
        if on_cache:
            parser.add_argument(
                "--cache",
                metavar="DIR",
                help="kernel cache directory (default: NKIPY_CACHE, else ./nkipy_cache)",
            )
        parser.set_defaults(handler=handler)
        return parser

    sub("ls", cmd_ls, "every entry: key, kernel, runtime, bytes, last use, why it is trusted, tier")
    sub("stats", cmd_stats, "entries and bytes per runtime, the size limit, unusable entries")
    verify = sub(
        "verify",
        cmd_verify,
        "check every entry's checksums and its seal, signature or pin (exit 1 if one fails)",
    )
    verify.add_argument("--remove", action="store_true", help="remove the local entries that fail")
    prune = sub("prune", cmd_prune, "remove entries unused for a while, or to fit a size")
    prune.add_argument("--max-size", metavar="SIZE", help="keep at most SIZE bytes (e.g. 20GiB)")
    prune.add_argument(
        "--older-than", metavar="DURATION", help="remove entries unused for DURATION (e.g. 7d)"
    )
    export = sub(
        "export",
        cmd_export,
        "pack the trusted entries into FILE.tar (signed with NKIPY_CACHE_SIGNING_KEY if set) "
        "and write their digests to FILE.tar.digests",
    )
    export.add_argument("file", metavar="FILE.tar")
    imp = sub(
        "import",
        cmd_import,
        "install the entries of FILE.tar that are signed by a trusted key or pinned; refuse the "
        "others (exit 1 if any)",
    )
    imp.add_argument("file", metavar="FILE.tar")
    keygen = sub(
        "keygen",
        cmd_keygen,
        "make a signing key for a build machine; prints the public key line to trust it",
        on_cache=False,
    )
    keygen.add_argument(
        "--out", required=True, metavar="FILE", help="where to write the private key"
    )
    keygen.add_argument("--name", default="build", help="a name for the key (default: build)")
