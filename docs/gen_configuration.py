"""Generate docs/configuration.md from the table of environment variables,
``nkipy_core.config.env``, with every installed pack loaded (packs declare their variables
when imported: run it where all the packs of this repository are installed).

Run: python docs/gen_configuration.py          (rewrites docs/configuration.md)
     python docs/gen_configuration.py --check  (exit 1 if the committed file is out of date)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nkipy_core.config import env
from nkipy_core.plugin import manager

OUT = Path(__file__).with_name("configuration.md")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the page is out of date")
    args = parser.parse_args()
    manager.get(strict=True)  # every pack imported, so every pack's variables are declared
    text = env.render()
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT} is out of date: run python docs/gen_configuration.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
