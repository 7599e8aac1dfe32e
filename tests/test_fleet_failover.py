"""The watched fleet, short: 2 replicas behind HAProxy on a 3+3 Redis Cluster, one primary
killed under load (``benchmarks/fleet_watch.py --quick``).

Asserted: no client request fails while the primary is lost and its replica
promoted, and the run saw the promotion. The run uses the mode that waits for
the store (``store_wait``, passed with ``--cache-option``). Disagreements are
printed, not asserted: runs here saw from 1 (a decision served just before the
kill that had not reached the replica: Redis replicates asynchronously) to
dozens, some outside the lost primary's slots, which is still to be explained.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from asyncache import DecisionCache

from .support import require_binary, subprocess_env

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]


def _waiting_mode() -> list[str]:
    """The harness's option for the waiting consistency mode, if this cache has one."""
    import inspect

    parameters = inspect.signature(DecisionCache).parameters
    if "store_wait" in parameters:
        # Above a primary's failover here (3 s node timeout, then the election).
        return ["--cache-option", "store_wait=10"]
    return []


def test_a_primary_failover_under_load_fails_no_request(tmp_path: Path) -> None:
    for binary in ("redis-server", "redis-cli", "haproxy"):
        require_binary(binary)
    report_path = tmp_path / "fleet.json"
    waiting = _waiting_mode()
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "fleet_watch.py"),
            "--quick",
            "--json",
            str(report_path),
            *waiting,
        ],
        cwd=ROOT,
        env=subprocess_env(str(ROOT)),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout)
    report = json.loads(report_path.read_text())
    summary = report["summary"]
    (fault,) = report["faults"]
    assert summary["requests"] > 0
    assert summary["failed requests"] == 0
    assert fault["fault"] == "kill -9 primary" and fault["failed"] == 0
    assert isinstance(fault["promoted after s"], float)
    # Every input asked was answered, and at least one run made each answer.
    assert summary["model runs"] >= summary["inputs run more than once"]
    # Disagreements (an input answered differently by two runs) are printed, not
    # asserted: in the waiting mode this run still sees some (see the module's note).
    print(
        f"mode: {waiting or 'fail_open'}; disagreements: {summary['disagreements (inputs)']}"
        f" (on the lost primary's keys / others: {fault.get('disagreements on its keys / others')})"
    )
