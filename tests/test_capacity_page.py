"""docs/capacity.md is one run of benchmarks/capacity.py, and its prediction held in that run.

The page predicts what one Redis primary serves from what a hit and a leased
miss each cost Redis's CPU, measured alone. The same run then measures a mix
of the two (90% hits) and compares: the page must come from a run whose
prediction was within the tolerance (25%) of the mix it measured. (Predicting
from command counts, every command costing what a pipelined ``GET`` does, was
2.7 times too optimistic.) The run's numbers are kept beside the script
(``benchmarks/capacity.json``); the page is rendered from them again here, so
a hand edit or a stale page fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .support import subprocess_env

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "capacity.md"
RUN = ROOT / "benchmarks" / "capacity.json"


def test_the_page_is_its_runs_rendering(tmp_path: Path) -> None:
    page = tmp_path / "capacity.md"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "capacity.py"),
            "--page-from",
            str(RUN),
            "--write",
            str(page),
        ],
        cwd=ROOT,
        env=subprocess_env(str(ROOT)),
        check=True,
        timeout=120,
    )
    assert page.read_text() == PAGE.read_text()


def test_the_prediction_held_in_the_run() -> None:
    run = json.loads(RUN.read_text())
    hammer, check = run["hammer"], run["check"]
    per_hit = hammer["hits"]["Redis CPU seconds"] / hammer["hits"]["hits"]
    per_miss = hammer["misses"]["Redis CPU seconds"] / hammer["misses"]["misses"]
    h = check["hit rate"]
    predicted = 1 / (h * per_hit + (1 - h) * per_miss)
    assert abs(predicted - check["predicted requests per Redis CPU second"]) <= 1
    mixed = check["run"]
    measured = (mixed["hits"] + mixed["misses"]) / mixed["Redis CPU seconds"]
    assert abs(measured - check["measured requests per Redis CPU second"]) <= 1
    assert abs(mixed["hits"] / (mixed["hits"] + mixed["misses"]) - h) < 0.02
    assert abs(measured / predicted - 1) <= check["tolerance"] <= 0.25
    # A leased miss is measured, not assumed: its CPU, not its command count, sets P(h).
    assert run["per operation"]["miss under a lease"]["commands"] > 1
    assert f"predicted P({h}) = {round(predicted):,}" in PAGE.read_text()
