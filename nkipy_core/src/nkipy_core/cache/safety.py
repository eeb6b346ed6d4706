"""Private directories for the kernel cache: created for this user only, refused when others
could write them.

Whoever can write a cache directory decides what the processes reading it run: its entries are
trusted only when sealed with this user's key (``trust``), but an attacker who can write the
directory can still delete entries, fill the disk or replace the layout under a process. So, as
ssh does for its keys, a cache root (and every directory of the layout below it) must belong to
this user and be writable by nobody else; otherwise opening the cache raises
``UnsafeCacheError`` naming the directory and the command that fixes it. Directories nkipy
creates are made ``0700`` and files ``0600``, whatever the umask, so a cache starts private.

Directories *above* the root that nkipy did not create (``/tmp``, a home directory, an NFS
mount point) are the administrator's and are not checked: a sticky world-writable ``/tmp`` is
fine as a parent, as long as the root nkipy uses inside it is private.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from nkipy_core.errors import UnsafeCacheError

#: mode of the directories nkipy creates for a cache
PRIVATE_DIR = 0o700
#: mode of the files nkipy creates in a cache
PRIVATE_FILE = 0o600


def make_private_dirs(path: Path) -> list[Path]:
    """Create ``path`` and any missing parents, each ``0700``; the directories created, outermost
    first (``os.makedirs`` would give the parents the umask's mode instead)."""
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    created = []
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:  # another rank made it meanwhile: checked like any other
            continue
        os.chmod(directory, PRIVATE_DIR)  # mkdir's mode is masked by the umask
        created.append(directory)
    return created


def check_private(path: Path, role: str = "kernel cache directory") -> None:
    """Raise ``UnsafeCacheError`` unless ``path`` belongs to this user and no one else may write
    it (the ssh ``StrictModes`` rule). ``role`` names what the path is, for the message."""
    info = path.lstat()
    me = os.geteuid()
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeCacheError(
            f"the {role} {path} is a symbolic link; nkipy does not follow links inside a cache. "
            f"Point nkipy at the directory itself, or remove the link."
        )
    if info.st_uid != me:
        raise UnsafeCacheError(
            f"the {role} {path} belongs to {_user(info.st_uid)}, not to you ({_user(me)}): "
            "whoever owns it decides what nkipy runs. Use a cache directory of your own "
            "(NKIPY_CACHE or init_nkipy_backend(nkipy_cache=...)); to read kernels another user "
            "or a build machine compiled, list their directory in NKIPY_CACHE_SHARED (its "
            "entries must then be signed by a key you trust) or import an export of it with "
            "`nkipy-ops cache import`."
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeCacheError(
            f"the {role} {path} can be written by "
            f"{'everyone' if info.st_mode & stat.S_IWOTH else 'its group'} "
            f"(mode {stat.S_IMODE(info.st_mode):04o}), so others could plant kernels in it. "
            f"Make it private with `chmod go-w {path}` (or `chmod 700 {path}`), or use another "
            "directory."
        )


def _user(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name!r} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def open_private(path: Path, flags: int) -> int:
    """``os.open`` of a file nkipy creates in a cache: ``0600`` whatever the umask."""
    return os.open(path, flags, PRIVATE_FILE)
