"""The ``asyncache`` command, run through its real entry points in child processes."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.redact import redact_text, redact_url

from ..servers import RedisServer, send_command
from ..support import free_port, require, require_binary
from ..support.stores import fill, sqlite_file

ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = shutil.which("asyncache", path=str(Path(sys.executable).parent))


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

    now = time.time()
    fill(
        url,
        [
            (b"a" * 16, b"x" * 100, now + 3600),
            (b"b" * 16, b"x" * 100, now + 7200),
            (b"c" * 16, b"x" * 100, None),
            (b"d" * 16, b"x" * 10, now - 60),
            (b"e" * 16, b"x" * 10, now - 120),
        ],
    )
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
    with sqlite_file(path) as raw:
        raw.execute("CREATE TABLE other (x)")
    message = one_line_error(run("stats", f"sqlite:///{path}"))
    assert "is not an asyncache SQLite store" in message
    with sqlite_file(path) as raw:
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

    def entries(count: int) -> list[tuple[bytes, bytes, float | None]]:
        return [(bytes([i]) * 16, b"v" * 8, time.time() + 60 if i else None) for i in range(count)]

    fill(url, entries(4))
    fill(neighbour, entries(2))
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


# -- passwords: no URL the command prints or logs shows one ---------------------

SECRET = "hunter2-Qx7vZ"
"""The password of every URL below: no output of the command may hold it."""


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:hunter2@host/0", "redis://***@host/0"),
        ("redis://user:hunter2@host:6379/0?prefix=a:", "redis://***@host:6379/0?prefix=a:"),
        ("redis://token-only@host", "redis://***@host"),
        ("rediss+cluster://u:p@h1:1,h2:2?prefix=x", "rediss+cluster://***@h1:1,h2:2?prefix=x"),
        ("tiered+redis://:pw@h?l1_ttl=5", "tiered+redis://***@h?l1_ttl=5"),
        (
            "redis://h/0?prefix=a&password=x&PASS=y&ssl_password=z&token=t&api_key=k&db=1",
            "redis://h/0?prefix=a&password=***&PASS=***&ssl_password=***&token=***"
            "&api_key=***&db=1",
        ),
        (
            "redis://h?ssl_keyfile=/etc/k.pem&secret=s",
            "redis://h?ssl_keyfile=/etc/k.pem&secret=***",
        ),
        ("unix:///run/redis.sock?passwd=pw", "unix:///run/redis.sock?passwd=***"),
        # Unescaped characters in a password: hide more rather than less.
        ("redis://:ab/cd@host/0", "redis://***@host/0"),
        ("redis://:ab?cd@host/0", "redis://***@host/0"),
        ("redis://:ab#cd@host", "redis://***@host"),
        ("redis://:a@b@host", "redis://***@host"),
        ("http://u:p@h:8000/stats?x=1#token=t", "http://***@h:8000/stats?x=1#token=***"),
        # Nothing secret: as written.
        ("sqlite:///tmp/a@b.db?busy_timeout=3", "sqlite:///tmp/a@b.db?busy_timeout=3"),
        ("redis://host:6379?client_name=me@x.org", "redis://host:6379?client_name=me@x.org"),
        ("memory://?max_entries=10", "memory://?max_entries=10"),
        ("not-a-url", "not-a-url"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_text_cuts_the_secrets_of_urls_wherever_they_are() -> None:
    url = f"redis://user:{SECRET}@host/0?token=abc%2Fdef"
    text = f"cannot open {url}: AUTH user {SECRET} refused; token abc/def; ab stays"
    redacted = redact_text(text, [url, "not-a-url"])
    assert SECRET not in redacted and "abc" not in redacted
    assert redacted.startswith("cannot open redis://***@host/0?token=***: AUTH user *** refused")
    assert redacted.endswith("; ab stays")


def assert_no_secret(result: subprocess.CompletedProcess[str]) -> None:
    assert SECRET not in result.stdout, result.stdout
    assert SECRET not in result.stderr, result.stderr


@pytest.fixture(scope="module")
def secret_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of a redis-server of this module's own that needs the password ``SECRET``.

    The default user has it (``redis://:SECRET@``) and so does the user ``cli``
    (``redis://cli:SECRET@``).
    """
    pytest.importorskip("redis")
    server = RedisServer(require_binary("redis-server"), tmp_path_factory.mktemp("secret-redis"))
    server.start()
    try:
        send_command(server.port, "ACL", "SETUSER", "cli", "on", f">{SECRET}", "~*", "&*", "+@all")
        send_command(server.port, "CONFIG", "SET", "requirepass", SECRET)
        yield server.port
    finally:
        server.stop()


@pytest.fixture(params=["default", "user"])
def secret_url(request: pytest.FixtureRequest, secret_redis: int, redis_prefix: str) -> str:
    """A store on ``secret_redis`` with 3 entries, its URL with the password in it."""
    user = "" if request.param == "default" else "cli"
    url = f"redis://{user}:{SECRET}@127.0.0.1:{secret_redis}/0?prefix={redis_prefix}"

    fill(url, [(bytes([i]) * 16, b"v" * 8, time.time() + 600) for i in range(3)])
    return url


def test_stats_never_shows_the_password(secret_url: str) -> None:
    table = run("stats", secret_url)
    assert table.returncode == 0, table.stderr
    assert_no_secret(table)
    assert redact_url(secret_url) in table.stdout  # the title, on one line
    assert "entries" in table.stdout
    as_json = run("stats", secret_url, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert_no_secret(as_json)
    assert json.loads(as_json.stdout)["store"]["entries"] == 3


def test_prune_never_shows_the_password(secret_url: str) -> None:
    result = run("prune", secret_url)
    assert result.returncode == 0, result.stderr
    assert_no_secret(result)
    assert f"from {redact_url(secret_url)} (Redis expires" in result.stdout


def test_clear_never_shows_the_password(secret_url: str) -> None:
    refused = run("clear", secret_url, stdin="n\n")
    assert refused.returncode == 1
    assert_no_secret(refused)
    assert f"delete all 3 entries in {redact_url(secret_url)}?" in refused.stdout
    agreed = run("clear", secret_url, "--yes")
    assert agreed.returncode == 0, agreed.stderr
    assert_no_secret(agreed)
    assert f"cleared {redact_url(secret_url)} (3 entries)" in agreed.stdout


def test_a_wrong_password_is_one_line_without_it(secret_redis: int) -> None:
    for user in ("", "cli"):
        url = f"redis://{user}:{SECRET}-wrong@127.0.0.1:{secret_redis}/0?retries=0"
        for args in (("stats", url), ("clear", url, "--yes")):
            result = run(*args)
            assert_no_secret(result)
            assert "AuthenticationError" in one_line_error(result)
        pruned = run("prune", url)  # which sends Redis no command
        assert pruned.returncode == 0, pruned.stderr
        assert_no_secret(pruned)


_UNREACHABLE = f"redis://:{SECRET}@127.0.0.1:1/0?retries=0"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("stats", _UNREACHABLE), "ConnectionError"),
        (("stats", "--json", _UNREACHABLE), "ConnectionError"),
        (("prune", f"{_UNREACHABLE}&prefix="), "RedisStore option prefix=''"),
        (("clear", _UNREACHABLE), "ConnectionError"),
        (("clear", "--yes", _UNREACHABLE), "ConnectionError"),
        (("stats", f"tiered+{_UNREACHABLE}"), "ConnectionError"),
        (
            ("stats", f"redis://user:{SECRET}@127.0.0.1:1/0?retries=0&token={SECRET}"),
            "unknown RedisStore option(s) ['token']",
        ),
        # Messages that quote the URL.
        (("prune", f"foo://user:{SECRET}@somewhere/0"), "'foo://***@somewhere/0'"),
        (("clear", f"redis://:{SECRET}@host:port/0"), "bad port in 'redis://"),
        (("stats", f"redis://:{SECRET}@h/0?prefix=a&prefix=b"), "given twice in 'redis://"),
        (("stats", f"redis://127.0.0.1:1/0?password={SECRET}"), "['password']"),
        (("stats", f"redis://127.0.0.1:1/0?ssl_password={SECRET}"), "['ssl_password']"),
        (("prune", f"sqlite:///missing.db?password={SECRET}"), "unknown sqlite option"),
        (("stats", f"sqlite://cli:{SECRET}@/cache.db"), "take no host ('sqlite://***@/cache.db')"),
        (
            ("stats", "--live", f"http://cli:{SECRET}@127.0.0.1:1/cache/stats"),
            "cannot reach http://***@127.0.0.1:1/cache/stats",
        ),
        (
            ("stats", "--live", f"http://cli:{SECRET}@127.0.0.1:port/cache/stats"),
            "cannot reach http://***@127.0.0.1:port/cache/stats",
        ),
        (
            ("stats", "--live", f"http://127.0.0.1:1/cache/stats?token={SECRET}"),
            "cannot reach http://127.0.0.1:1/cache/stats?token=***",
        ),
    ],
)
def test_failures_never_show_the_password(args: tuple[str, ...], message: str) -> None:
    result = run(*args)
    assert_no_secret(result)
    assert message in one_line_error(result)
    with_traceback = run("--traceback", *args)
    assert with_traceback.returncode != 0
    assert "Traceback" in with_traceback.stderr
    assert_no_secret(with_traceback)


@pytest.mark.parametrize(
    "args",
    [
        (f"redis://:{SECRET}@127.0.0.1:1/0",),  # not a command
        ("stats", "memory://", f"redis://:{SECRET}@127.0.0.1:1/0"),  # one URL too many
        ("prune", f"--store=redis://:{SECRET}@127.0.0.1:1/0"),  # not an option of prune
        ("clear",),
    ],
)
def test_usage_errors_never_show_the_password(args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert_no_secret(result)
    assert "usage: asyncache" in result.stderr


def test_stats_of_a_live_process_with_a_password(live_endpoint: str) -> None:
    url = live_endpoint.replace("http://", f"http://cli:{SECRET}@")
    result = run("stats", "--live", url)
    assert result.returncode == 0, result.stderr
    assert_no_secret(result)
    assert redact_url(url) in result.stdout
    assert "hit_rate" in result.stdout


_LEAKY_MODULE = """
import logging, os
from asyncache import DecisionCache, cached_prediction

cache = DecisionCache(namespace="leaky")

@cached_prediction(cache)
async def score(text: str) -> str:
    # What a careless model, or a library under it, might say.
    logging.getLogger("asyncache.leaky").warning("scoring against %s", os.environ["STORE"])
    raise ValueError(f"cannot score {text}: {os.environ['STORE']} said no")
"""


def test_warm_never_shows_the_password(secret_url: str, tmp_path: Path) -> None:
    (tmp_path / "leaky.py").write_text(_LEAKY_MODULE)
    (tmp_path / "inputs.jsonl").write_text('"a"\n"b"\n')
    args = ("warm", "leaky:score", "inputs.jsonl", "--store", secret_url)
    for extra in ((), ("--json",)):
        result = run(*args, *extra, cwd=tmp_path, env={"STORE": secret_url})
        assert result.returncode == 1
        assert_no_secret(result)
        assert f"scoring against {redact_url(secret_url)}" in result.stderr
        assert f"{redact_url(secret_url)} said no" in result.stdout
