"""``pip install``, one at a time across tox's parallel environments.

Each environment installs the distributions from their folders in this repository, and pip
builds a folder in place (setuptools writes ``build/`` and ``*.egg-info`` into it), so two
environments building nkipy-core at the same moment can break each other's build ("Failed to
build nkipy-core"). tox runs this instead of pip (``install_command`` in ``tox.ini``): it
waits for a lock on ``.tox/pip.lock``, then runs pip with the arguments tox gave."""

import fcntl
import subprocess
import sys
from pathlib import Path


def main() -> int:
    lock = Path(__file__).resolve().parents[1] / ".tox" / "pip.lock"
    lock.parent.mkdir(exist_ok=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
        return subprocess.call([sys.executable, "-I", "-m", "pip", "install", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
