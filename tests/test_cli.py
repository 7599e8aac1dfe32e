"""The ``asyncache`` command, run through its real entry points in child processes."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from asyncache import DecisionCache, cached_prediction, open_store

from .support import free_port, require

ROOT = Path(__file__).resolve().parent.parent
_SCRIPT = shutil.which("asyncache", path=str(Path(sys.executable).parent))

pytest.importorskip("aiosqlite")


def run(
    *args: str,
    cwd: Path | None = None,
    stdin: str = "",
    env: dict[str, str] | None = None,
    module: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``asyncache`` script (or ``python -m asyncache``)."""
    if module or _SCRIPT is None:
        command = [sys.executable, "-m", "asyncache", *args]
    else:
        command = [_SCRIPT, *args]
    environment = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        command,
        cwd=cwd or ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The failure's message: non-zero exit, one stderr line, no traceback."""
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("asyncache: error: "), lines
    return lines[0]


@pytest.fixture
def filled(tmp_path: Path) -> str:
    """An SQLite store with 3 live entries (one without expiry) and 2 expired ones."""
    url = f"sqlite:///{tmp_path / 'cache.db'}"

    async def fill() -> None:
        store = open_store(url)
        now = time.time()
        await store.add(b"a" * 16, b"x" * 100, now + 3600)
        await store.add(b"b" * 16, b"x" * 100, now + 7200)
        await store.add(b"c" * 16, b"x" * 100, None)
        await store.add(b"d" * 16, b"x" * 10, now - 60)
        await store.add(b"e" * 16, b"x" * 10, now - 120)
        await store.aclose()

    asyncio.run(fill())
    return url


def test_the_console_script_is_installed() -> None:
    require(_SCRIPT is not None, "the asyncache console script is not installed in this venv")
    result = run("--help")
    assert result.returncode == 0
    for command in ("stats", "prune", "clear", "warm", "demo"):
        assert command in result.stdout


def test_stats_of_a_sqlite_store(filled: str) -> None:
    result = run("stats", filled, "--json")
    assert result.returncode == 0, result.stderr
    store = json.loads(result.stdout)["store"]
    assert store["entries"] == 5
    assert store["live"] == 3
    assert store["expired"] == 2
    assert store["without_expiry"] == 1
    assert store["stored_bytes"] == 320
    assert store["next_expiry"] < store["last_expiry"]
    assert (store["kind"], store["schema_version"]) == ("sqlite", 1)
    table = run("stats", filled)
    assert table.returncode == 0, table.stderr
    assert "entries" in table.stdout and "expired" in table.stdout
    assert "320 B" in table.stdout
    assert "schema version" in table.stdout


def test_stats_of_a_tier_shows_the_shared_store(filled: str) -> None:
    result = run("stats", f"tiered+{filled}", "--json")
    assert result.returncode == 0, result.stderr
    store = json.loads(result.stdout)["store"]
    assert (store["kind"], store["l2_kind"], store["entries"]) == ("tiered", "sqlite", 5)
    assert store["l1"]["entries"] == 0  # a new process's memory


def test_stats_leaves_another_applications_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE other (x)")
    message = one_line_error(run("stats", f"sqlite:///{path}"))
    assert "is not an asyncache SQLite store" in message
    with sqlite3.connect(path) as raw:
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}
    assert tables == {"other"}


def test_stats_as_python_m(filled: str) -> None:
    result = run("stats", filled, "--json", module=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["store"]["entries"] == 5


def test_prune_drops_expired_entries(filled: str) -> None:
    result = run("prune", filled)
    assert result.returncode == 0, result.stderr
    assert "pruned 2 expired entries" in result.stdout
    store = json.loads(run("stats", filled, "--json").stdout)["store"]
    assert (store["entries"], store["expired"]) == (3, 0)


def test_clear_asks_first(filled: str) -> None:
    refused = run("clear", filled, stdin="n\n")
    assert refused.returncode == 1
    assert "delete all 5 entries" in refused.stdout
    assert json.loads(run("stats", filled, "--json").stdout)["store"]["entries"] == 5
    no_terminal = run("clear", filled)  # stdin at EOF: no answer is no
    assert no_terminal.returncode == 1
    agreed = run("clear", filled, stdin="y\n")
    assert agreed.returncode == 0, agreed.stderr
    assert json.loads(run("stats", filled, "--json").stdout)["store"]["entries"] == 0


def test_clear_yes_on_redis_drops_only_its_prefix(redis_url: str, redis_prefix: str) -> None:
    pytest.importorskip("redis")
    url = f"{redis_url}?prefix={redis_prefix}a:"
    neighbour = f"{redis_url}?prefix={redis_prefix}b:"

    async def fill(target: str, count: int) -> None:
        store = open_store(target)
        for i in range(count):
            await store.add(bytes([i]) * 16, b"v" * 8, time.time() + 60 if i else None)
        await store.aclose()

    asyncio.run(fill(url, 4))
    asyncio.run(fill(neighbour, 2))
    stats = json.loads(run("stats", url, "--json").stdout)["store"]
    assert (stats["entries"], stats["without_expiry"]) == (4, 1)
    assert stats["stored_bytes"] >= 32  # the values and RedisStore's expiry header
    assert stats["next_expiry"] > time.time()
    result = run("clear", url, "--yes")
    assert result.returncode == 0, result.stderr
    assert "4 entries" in result.stdout
    assert json.loads(run("stats", url, "--json").stdout)["store"]["entries"] == 0
    assert json.loads(run("stats", neighbour, "--json").stdout)["store"]["entries"] == 2


@pytest.fixture
def live_endpoint() -> Iterator[str]:
    """A live process's stats endpoint: the middleware's CacheStatsEndpoint under uvicorn."""
    uvicorn = pytest.importorskip("uvicorn")
    from asyncache.middleware import CacheStatsEndpoint

    cache = DecisionCache()

    async def traffic() -> None:
        @cached_prediction(cache, namespace="f")
        async def f(x: int) -> int:
            return x

        for x in (1, 1, 1, 2):
            await f(x)

    asyncio.run(traffic())
    port = free_port()
    config = uvicorn.Config(
        CacheStatsEndpoint(cache), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}/cache/stats"
    server.should_exit = True
    thread.join(timeout=30)


def test_stats_of_a_live_process(live_endpoint: str) -> None:
    result = run("stats", "--live", live_endpoint, "--json")
    assert result.returncode == 0, result.stderr
    live = json.loads(result.stdout)["live"]
    assert (live["hits"], live["misses"]) == (2, 2)
    # The middleware's nested counters, flattened to dotted names.
    assert any(name.startswith("middleware.") for name in live), live
    table = run("stats", "--live", live_endpoint)
    assert table.returncode == 0, table.stderr
    assert "hit_rate" in table.stdout and "0.500" in table.stdout


_MODULE = """
import asyncio
from asyncache import DecisionCache, cached_prediction

cache = DecisionCache(namespace="cli", ttl=3600)

@cached_prediction(cache)
async def score(text: str, n: int = 1) -> dict:
    await asyncio.sleep(0.001)
    if text == "boom":
        raise ValueError("cannot score boom")
    return {"text": text, "n": n}

async def not_cached(text: str) -> str:
    return text
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "scoring.py").write_text(_MODULE)
    lines = [{"text": f"t{i}"} for i in range(20)] + [["t0", 1], "t1"]
    (tmp_path / "inputs.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    return tmp_path


def test_warm_fills_a_store(project: Path) -> None:
    url = f"sqlite:///{project / 'warm.db'}"
    args = ("warm", "scoring:score", "inputs.jsonl", "--store", url, "--concurrency", "4")
    first = run(*args, "--json", cwd=project)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) | {"seconds": 0} == {
        "computed": 20,
        "cached": 2,
        "failed": 0,
        "seconds": 0,
        "errors": [],
    }
    again = run(*args, cwd=project)  # with the progress bar and the table
    assert again.returncode == 0, again.stderr
    assert "already cached" in again.stdout
    assert "22" in again.stdout
    assert json.loads(run("stats", url, "--json").stdout)["store"]["entries"] == 20


def test_warm_reports_failures(project: Path) -> None:
    (project / "bad.jsonl").write_text('{"text": "ok"}\n{"text": "boom"}\n')
    url = f"sqlite:///{project / 'warm.db'}"
    result = run("warm", "scoring:score", "bad.jsonl", "--store", url, "--json", cwd=project)
    assert result.returncode == 1
    summary = json.loads(result.stdout)
    assert (summary["computed"], summary["failed"]) == (1, 1)
    assert "cannot score boom" in summary["errors"][0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("stats", "foo://nowhere"), "unknown store scheme"),
        (("stats", "sqlite:///missing.db"), "no such file"),
        (("stats", "tiered+sqlite:///missing.db"), "no such file"),
        (("prune", "not-a-url"), "not a store URL"),
        (("stats", "redis://127.0.0.1:1?retries=0"), "ConnectionError"),
        (("stats", "--live", "http://127.0.0.1:1/stats"), "cannot reach"),
        (("warm", "scoring:score", "missing.jsonl"), "cannot read missing.jsonl"),
        (("warm", "scoring:score", "broken.jsonl"), "broken.jsonl:2: not JSON"),
        (("warm", "nosuchmodule:f", "inputs.jsonl"), "cannot import nosuchmodule"),
        (("warm", "scoring:nope", "inputs.jsonl"), "has no attribute 'nope'"),
        (("warm", "scoring:not_cached", "inputs.jsonl"), "not a @cached_prediction function"),
        (("warm", "scoring", "inputs.jsonl"), "expected module:function"),
        (("stats",), "needs a store URL"),
    ],
)
def test_failures_are_one_line(project: Path, args: tuple[str, ...], message: str) -> None:
    (project / "broken.jsonl").write_text('{"text": "a"}\n{oops\n')
    assert message in one_line_error(run(*args, cwd=project))


def test_a_missing_extra_is_one_line(tmp_path: Path) -> None:
    # A redis package that cannot be imported, as when the extra is not installed.
    fake = tmp_path / "site" / "redis"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named redis')\n")
    env = {"PYTHONPATH": str(tmp_path / "site")}
    message = one_line_error(run("stats", "redis://127.0.0.1:6390", env=env))
    assert "pip install 'asyncache-ml[redis]'" in message


def test_demo_is_a_subcommand_with_its_own_options() -> None:
    result = run("demo", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: asyncache demo" in result.stdout or "asyncache demo" in result.stdout


def test_unknown_options_are_usage_errors() -> None:
    result = run("prune", "memory://", "--bogus")
    assert result.returncode == 2
    assert "unrecognized arguments: --bogus" in result.stderr
