"""Print pyproject.toml's declared floors as pins, one a line (scripts/test-floors).

Every ``>=`` of the runtime dependencies and of the extras named on the command
line becomes ``==``: what a user whose other pins hold each dependency at its
floor gets. ``--constraints`` prints the names without their extras, as pip's
``-c`` file wants them. Usage: python scripts/floors.py [--constraints] EXTRA...
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# name[extras]>=version, optionally more clauses after a comma (none here today).
SPEC = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)(?P<extras>\[[^\]]*\])?>=(?P<floor>[^,;\s]+)$")


def floors(extras: list[str]) -> list[str]:
    """``name[extras]==floor`` for the dependencies and the named extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in extras:
        specs += project["optional-dependencies"][extra]
    pins = []
    for spec in specs:
        match = SPEC.match(spec.replace(" ", ""))
        if match is None:
            raise SystemExit(f"scripts/floors.py: no floor to pin in {spec!r}")
        pins.append(f"{match['name']}{match['extras'] or ''}=={match['floor']}")
    return pins


def main(args: list[str]) -> None:
    constraints = "--constraints" in args
    pins = floors([arg for arg in args if arg != "--constraints"])
    for pin in pins:
        print(re.sub(r"\[[^\]]*\]", "", pin) if constraints else pin)


if __name__ == "__main__":
    main(sys.argv[1:])
