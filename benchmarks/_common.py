"""Pieces the benchmark scripts share: the table, its JSON document, a private redis-server.

Not a benchmark itself (``report.py`` runs only the scripts it names). The scripts run as
``python benchmarks/x.py``, which puts this folder first on ``sys.path``: they import this
module as ``_common``. Importing it puts the checkout's root on ``sys.path`` too, so that
``asyncache`` and ``tests`` import from a checkout without installing.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.servers import RedisCluster, RedisServer

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing

COLUMNS = ["measure", "measured", "unit", "target", "ratio/pass"]


@dataclass
class Row:
    """One line of a measure/target table."""

    measure: str
    measured: float | None
    unit: str
    target: str
    verdict: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "measure": self.measure,
            "measured": None if self.measured is None else round(self.measured, 3),
            "unit": self.unit,
            "target": self.target,
            "ratio/pass": self.verdict,
        }


def passes(ok: bool) -> str:
    return "pass" if ok else "MISS"


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """``rows`` under ``columns``, each column as wide as its widest cell."""
    header, *cells = [[str(cell) for cell in row] for row in [columns, *rows]]
    widths = [max(len(c) for c in column) for column in zip(header, *cells, strict=True)]

    def line(row: list[str]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))

    return "\n".join([line(header), "-+-".join("-" * w for w in widths), *map(line, cells)])


def render(rows: Sequence[Row]) -> str:
    """The measure/target table of ``rows``."""
    return table(
        COLUMNS,
        [
            [
                row.measure,
                "n/a" if row.measured is None else f"{row.measured:,.2f}".rstrip("0").rstrip("."),
                row.unit,
                row.target,
                row.verdict,
            ]
            for row in rows
        ],
    )


def machine(*extra: str) -> str:
    """``CPython 3.11.9, 2 CPUs`` and any ``extra`` parts, comma-separated."""
    parts = [f"{platform.python_implementation()} {platform.python_version()}"]
    return ", ".join([*parts, f"{os.cpu_count()} CPUs", *extra])


def write_rows_json(
    path: Path, *, title: str, command: str, rows: Sequence[Row], notes: Sequence[str]
) -> None:
    """Write a measure/target table as the JSON document ``report.py`` reads."""
    document = {
        "title": title,
        "command": command,
        "columns": COLUMNS,
        "rows": [row.as_dict() for row in rows],
        "notes": list(notes),
    }
    path.write_text(json.dumps(document, indent=2) + "\n")


def start_redis(workdir: Path) -> RedisServer | None:
    """A started private redis-server on a free loopback port; None without one on PATH."""
    from tests.servers import RedisServer

    binary = shutil.which("redis-server")
    if binary is None:
        return None
    server = RedisServer(binary, workdir / "redis")
    server.start()
    return server


def start_redis_cluster(workdir: Path) -> RedisCluster | None:
    """A started private 3-master Redis Cluster on free ports; None without redis-cli/server."""
    from tests.servers import start_cluster

    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        return None
    return start_cluster(server, cli, workdir / "redis-cluster")
