"""Which kernel cache entries a process may use: sealed by this user, signed by a trusted key, or
pinned by digest.

An entry's ``meta.json`` lists the SHA-256 of each of its files, so the digest of ``meta.json``
names the whole entry (its *entry digest*). Checksums beside the files only catch accidents:
whoever can rewrite a file can rewrite its checksum. What an attacker with write access to a
cache cannot forge is one of these, kept in the entry's ``seal.json``:

- a **seal**: HMAC-SHA256 of ``meta.json`` under this user's secret key (``NKIPY_CACHE_KEY``,
  by default ``~/.config/nkipy/cache.key``, created ``0600`` on first use). Every entry this
  user's processes write is sealed; only those processes can seal, so a sealed entry in the
  local cache is one they wrote. Two hosts with different home directories have different
  keys: they share kernels through signatures, not seals.
- a **signature**: ed25519 over ``meta.json`` by a build machine's key
  (``NKIPY_CACHE_SIGNING_KEY``, made by ``nkipy-ops cache keygen``), accepted when its public key
  is listed in ``NKIPY_CACHE_TRUSTED_KEYS``. Checked with the ``cryptography`` package
  (``pip install nkipy-core[signing]``), needed only to sign or to check signatures.
- a **pin**: the entry digest listed in ``NKIPY_CACHE_PINNED`` (one hex digest per line, e.g.
  the list ``nkipy-ops cache export`` writes beside its archive): no key needed, but a new pin
  list for every new kernel.

A reader trusts the local tier's entries by seal, signature or pin, and a shared tier's
(``NKIPY_CACHE_SHARED``) and an imported archive's by signature or pin only. Anything else is
not used: it is compiled again, counted, and warned about once (``kernel_cache``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from nkipy_core.cache.safety import check_private, make_private_dirs, open_private
from nkipy_core.config import env
from nkipy_core.errors import CacheError, ConfigurationError

log = logging.getLogger("nkipy.cache")

SEAL_FILE = "seal.json"

_KEYS_LOCK = threading.Lock()
#: secret key per key file, read once per process (an unwritable home gets a process-only key)
_SECRETS: dict[Path, bytes] = {}


class CacheTrustWarning(UserWarning):
    """Kernel cache entries were not used because nothing vouches for them (no seal of this
    user, no trusted signature, no pin): they are compiled again. Given once per cache root."""


def entry_digest(meta: bytes) -> str:
    """The digest that names a whole entry: SHA-256 of its ``meta.json`` bytes."""
    return hashlib.sha256(meta).hexdigest()


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/nkipy`` (``~/.config/nkipy``): where this user's keys live by default."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "nkipy"


def key_file() -> Path:
    """The file holding this user's sealing key."""
    return env.NKIPY_CACHE_KEY.get() or config_dir() / "cache.key"


def secret() -> bytes:
    """This user's sealing key, created on first use (see the module docstring).

    The key file must be private (``check_private``): a key others can read lets them seal.
    When it cannot be created (a read-only home), the process makes a key of its own, warned
    once: what it writes is then trusted by itself only, and recompiled by the next process."""
    path = key_file().expanduser()
    with _KEYS_LOCK:
        if path in _SECRETS:
            return _SECRETS[path]
        try:
            key = _read_or_create(path)
        except OSError as exc:
            warnings.warn(
                f"nkipy: cannot read or create the kernel cache key {path} ({exc}); this "
                "process seals its cache entries with a key of its own, so the next process will "
                "not trust them and compiles them again. Make the directory writable or set "
                f"{env.NKIPY_CACHE_KEY.name} to a file you own.",
                CacheTrustWarning,
                stacklevel=3,
            )
            key = secrets.token_bytes(32)
        _SECRETS[path] = key
        return key


def _read_or_create(path: Path) -> bytes:
    if not path.exists():
        make_private_dirs(path.parent)
        staged = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
        fd = open_private(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        try:
            os.link(staged, path)  # atomic and refuses to replace: concurrent ranks agree
        except FileExistsError:
            pass
        finally:
            staged.unlink()
    check_private(path, "kernel cache key file")
    if path.stat().st_mode & 0o077:
        raise CacheError(
            f"the kernel cache key file {path} can be read by others (mode "
            f"{path.stat().st_mode & 0o777:04o}), who could then seal kernels for you. Run "
            f"`chmod 600 {path}`, or delete it to make a new key (your cached kernels are then "
            "compiled again)."
        )
    text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 16:
        raise CacheError(
            f"the kernel cache key file {path} does not hold a key (hex, 16 bytes or more). "
            "Delete it and nkipy makes a new one."
        )
    return key


def seal(meta: bytes) -> str:
    """This user's seal of an entry's ``meta.json``."""
    return hmac.new(secret(), b"nkipy-entry\0" + meta, hashlib.sha256).hexdigest()


# -- signatures -------------------------------------------------------------------------------


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise ConfigurationError(
            "signing or checking kernel cache signatures needs the `cryptography` package: "
            "pip install 'nkipy-core[signing]'"
        ) from None
    return ed25519


@attrs.frozen
class PublicKey:
    """A trusted build machine's key: its raw ed25519 bytes and the name it was listed under."""

    raw: bytes
    name: str

    @property
    def key_id(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()[:16]

    def line(self) -> str:
        """How the key is listed in a trusted-keys file."""
        return f"ed25519 {self.raw.hex()} {self.name}"

    def verifies(self, signature: bytes, meta: bytes) -> bool:
        key = _ed25519().Ed25519PublicKey.from_public_bytes(self.raw)
        try:
            key.verify(signature, meta)
        except Exception:  # noqa: BLE001 - cryptography's InvalidSignature, or a malformed one
            return False
        return True


def generate_signing_key(path: Path, name: str) -> PublicKey:
    """Write a new ed25519 private key to ``path`` (``0600``, refusing to replace a file) and
    return its public key, to be listed in the fleet's ``NKIPY_CACHE_TRUSTED_KEYS``."""
    ed25519 = _ed25519()
    private = ed25519.Ed25519PrivateKey.generate()
    seed = private.private_bytes_raw()
    make_private_dirs(path.parent)
    fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "w") as f:
        f.write(f"{seed.hex()} {name}\n")
    return PublicKey(private.public_key().public_bytes_raw(), name)


def _signing_key() -> tuple[Any, PublicKey] | None:
    """The private key this process signs with (``NKIPY_CACHE_SIGNING_KEY``), if one is set."""
    path = env.NKIPY_CACHE_SIGNING_KEY.get()
    if path is None:
        return None
    path = Path(path).expanduser()
    check_private(path, "kernel cache signing key")
    seed_hex, _, name = path.read_text().strip().partition(" ")
    try:
        private = _ed25519().Ed25519PrivateKey.from_private_bytes(bytes.fromhex(seed_hex))
    except ValueError:
        raise ConfigurationError(
            f"{env.NKIPY_CACHE_SIGNING_KEY.name}={path} is not a key made by "
            "`nkipy-ops cache keygen`"
        ) from None
    return private, PublicKey(private.public_key().public_bytes_raw(), name or path.stem)


def sign(meta: bytes) -> dict[str, str] | None:
    """The signature of ``meta.json`` with this process's signing key, if it has one."""
    signer = _signing_key()
    if signer is None:
        return None
    private, public = signer
    return {"key": public.raw.hex(), "name": public.name, "signature": private.sign(meta).hex()}


def parse_keys(text: str, source: str) -> list[PublicKey]:
    """The keys of a trusted-keys file: ``ed25519 <hex> [name]`` per line, ``#`` comments."""
    keys = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        hex_key, _, name = rest.strip().partition(" ")
        try:
            raw = bytes.fromhex(hex_key)
        except ValueError:
            raw = b""
        if kind != "ed25519" or len(raw) != 32:
            raise ConfigurationError(
                f"{source}:{number}: expected `ed25519 <64 hex digits> [name]` (a line "
                f"`nkipy-ops cache keygen` prints), got {line!r}"
            )
        keys.append(PublicKey(raw, name.strip() or raw.hex()[:16]))
    return keys


def trusted_keys() -> list[PublicKey]:
    path = env.NKIPY_CACHE_TRUSTED_KEYS.get()
    if path is None:
        return []
    return parse_keys(Path(path).expanduser().read_text(), str(path))


def pinned_digests() -> frozenset[str]:
    path = env.NKIPY_CACHE_PINNED.get()
    if path is None:
        return frozenset()
    lines = Path(path).expanduser().read_text().splitlines()
    return frozenset(
        line.split("#", 1)[0].split()[0] for line in lines if line.split("#", 1)[0].strip()
    )


# -- verdicts ---------------------------------------------------------------------------------


def make_seal(meta: bytes, local: bool = True) -> dict[str, Any]:
    """The ``seal.json`` content of an entry this process writes (or imports)."""
    content: dict[str, Any] = {"mac": seal(meta)} if local else {}
    signature = sign(meta)
    if signature is not None:
        content["signatures"] = [signature]
    return content


def verdict(meta: bytes, seal_text: bytes | None, sealed_ok: bool) -> str | None:
    """Why an entry is trusted (``"sealed"``, ``"signed by NAME"``, ``"pinned"``), or ``None``.

    ``sealed_ok``: whether this user's seal counts (the local tier; never a shared tier or an
    archive, which another user's key could not have sealed)."""
    content = _seal_content(seal_text)
    if sealed_ok and isinstance(content.get("mac"), str):
        if hmac.compare_digest(content["mac"], seal(meta)):
            return "sealed"
    signatures = content.get("signatures")
    if isinstance(signatures, list) and signatures:
        by_raw = {k.raw.hex(): k for k in trusted_keys()}
        for signature in signatures:
            key = by_raw.get(str(signature.get("key"))) if isinstance(signature, dict) else None
            if key is not None and _verifies(key, signature, meta):
                return f"signed by {key.name}"
    if entry_digest(meta) in pinned_digests():
        return "pinned"
    return None


def signers(seal_text: bytes | None) -> Iterable[str]:
    """Names the entry's signatures claim (for listings; not a verdict)."""
    for signature in _seal_content(seal_text).get("signatures") or []:
        if isinstance(signature, dict):
            yield str(signature.get("name", "?"))


def _verifies(key: PublicKey, signature: dict[str, Any], meta: bytes) -> bool:
    try:
        raw = bytes.fromhex(str(signature.get("signature")))
    except ValueError:
        return False
    return key.verifies(raw, meta)


def _seal_content(seal_text: bytes | None) -> dict[str, Any]:
    if not seal_text:
        return {}
    try:
        content = json.loads(seal_text)
    except ValueError:
        return {}
    return content if isinstance(content, dict) else {}
