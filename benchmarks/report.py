"""Run every benchmark and write docs/performance.md, with charts under docs/img/.

    python benchmarks/report.py            # the full run (several minutes)
    python benchmarks/report.py --quick    # fewer iterations, for a smoke test
    python benchmarks/report.py --only fleet_watch --splice   # one section, the rest kept

Each script in SCRIPTS runs as a subprocess (``--json PATH``, and ``--quick``
when asked and supported); a script that is missing, fails or times out is
reported on the page, and the rest of the report goes on. Besides the scripts,
this file measures two series itself, so that the charts have data from the
same run: hit latency by input size, and hit throughput by concurrency, for
asyncache beside cashews, aiocache and async-lru (and raw redis-py and
aiosqlite where the store is remote or on disk).

Every number on the page is a median over several repeats, measured on the
machine the page names; ratios compare libraries measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import gc
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
DEFAULT_PAGE = ROOT / "docs" / "performance.md"
DEFAULT_IMAGES = ROOT / "docs" / "img"

# The scripts the other parts of the project ship, in the order the page shows them.
SCRIPTS: tuple[tuple[str, str], ...] = (
    ("hit_path", "The hit path: decorator on MemoryStore, key cost, heap per decision"),
    (
        "hit_path_before_after",
        "The hit path before and after the hit-path work: nested results, long inputs",
    ),
    ("stores", "Stores: SQLite, Redis, tiered, beside raw drivers and peers"),
    ("middleware", "The ASGI middleware, beside bare routes and fastapi-cache2"),
    ("middleware_timing", "The middleware's hit with its default settings, before and after"),
    ("models", "Models: MiniLM misses and hits, batching, offload"),
    ("backend_sharing", "One cache for every backend"),
    ("fleet", "Fleet: a hot-key burst across processes, leases off and on"),
    ("fleet_watch", "A fleet you can watch: replicas behind HAProxy through Redis faults"),
    ("capacity", "Capacity: what a decision costs Redis and SQLite"),
    ("load_client", "The demo's load client beside wrk, on one server's hits"),
    (
        "freshness",
        "Freshness: a hot key at its expiry across processes, with and without "
        "stale-while-revalidate",
    ),
    ("faults", "Faults: a stalled cluster primary, a killed lease owner"),
    ("streams", "Streamed results: first and last chunk of a miss, a follower and a hit"),
    ("trust", "Trust: a model that silently changes, under a bound on the wrong rate"),
    ("forget", "Forgetting tagged decisions"),
)

# Options a script runs with here beyond --json and --quick.
SCRIPT_ARGS: dict[str, list[str]] = {
    # Both consistency modes through the same faults, one table each, with an open-loop
    # load: a closed loop's connections all end up waiting on a fault's keys, which
    # would leave the other keys no requests to measure.
    "fleet_watch": ["--both-modes", "--rate", "300"],
    # "Before": the commit the hit-path work (issues 31 and 33) started from.
    "hit_path_before_after": ["--before-ref", "cf49116"],
    "middleware_timing": ["--before-ref", "cf49116", "--rounds", "20"],
}

SIZES = (140, 2_000, 20_000)
# Every Redis client gets a pool this large: more connections than tasks, so no
# library's numbers include waiting for a free connection.
POOL = 300
CONCURRENCY = (1, 8, 64, 256)
QUESTIONS = ("is this a refund request?", "is the customer angry?")


# -- small helpers ------------------------------------------------------------


# Measured by benchmarks/sqlite_side_by_side.py, not by this script: the SQLite store
# before and after it moved onto aiosqlite (issue 32), kept on the page it regenerates.
SQLITE_BEFORE_AFTER = """\
SQLiteStore runs on aiosqlite's connections (issue 32). Before (its own threads
on `sqlite3`, main at b1acc4d) and after, side by side in one run on the
machine the suite runs on (2 cores shared with other work, load average 7),
each side in subprocesses of its own, alternating over 21 rounds: `python
benchmarks/sqlite_side_by_side.py --before /path/to/main --rounds 21 --number
1000 --repeats 3`. CPU time counts both the loop's thread and the
connection's; wall time on a loaded machine varies from run to run (earlier runs of the
same command, under heavier load and before a hit stopped checking its
connection's thread: 1.14x to 1.27x for a hit, 0.99x to 1.18x for the
others). aiosqlite's own hop costs about 5 us more of the loop's CPU per
statement than the threads it replaced.

| measure | before (us) | after (us) | after / before |
|---|---|---|---|
| SQLiteStore hit, wall time | 87.7 | 98.6 | 1.12x |
| 64 concurrent hits, per hit, wall time | 14.9 | 15.7 | 1.06x |
| store of one decision (synchronous=NORMAL), wall time | 214.7 | 219.9 | 1.02x |
| SQLiteStore hit, CPU time (both threads) | 78.8 | 88.5 | 1.12x |
| 64 concurrent hits, per hit, CPU time (both threads) | 14.2 | 14.5 | 1.02x |
| store of one decision (synchronous=NORMAL), CPU time (both threads) | 147.8 | 152.2 | 1.03x |
"""


def log(message: str) -> None:
    print(f"[report] {message}", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return statistics.median(values)


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def fmt_us(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    micro = seconds * 1e6
    if micro < 10:
        return f"{micro:.2f}"
    if micro < 100:
        return f"{micro:.1f}"
    return f"{micro:,.0f}"


def fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def fmt_number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        if abs(value) >= 0.01:
            return f"{value:.3g}"
        return f"{value:.3g}"
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# -- the machine --------------------------------------------------------------


def load_average() -> str:
    if not hasattr(os, "getloadavg"):
        return "unknown"
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    packages = [
        "asyncache-ml",
        "cashews",
        "aiocache",
        "async-lru",
        "fastapi-cache2",
        "redis",
        "hiredis",
        "aiosqlite",
        "orjson",
        "onnxruntime",
        "torch",
    ]
    redis_server = shutil.which("redis-server")
    redis_version = "not on PATH"
    if redis_server:
        try:
            out = subprocess.run(
                [redis_server, "--version"], capture_output=True, text=True, timeout=10
            ).stdout
            redis_version = out.split("v=", 1)[1].split()[0] if "v=" in out else out.strip()
        except (OSError, subprocess.SubprocessError, IndexError):
            redis_version = "unknown"
    load = load_average()
    return {
        "CPU": cpu,
        "Cores": f"{os.cpu_count()} ({usable} usable by this process)",
        "Memory": memory,
        "OS": f"{platform.system()} {platform.release()}",
        "Load average at start (1/5/15 min)": load,
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "redis-server": redis_version,
        "Packages": ", ".join(f"{name} {version(name)}" for name in packages),
    }


# -- measuring ----------------------------------------------------------------


async def calibrate(call: Callable[[], Awaitable[Any]], budget: float) -> int:
    """How many calls take about ``budget`` seconds (after a warm-up)."""
    for _ in range(50):  # first-call costs, caches, branch predictors
        await call()
    number = 1
    while True:
        started = time.perf_counter()
        for _ in range(number):
            await call()
        elapsed = time.perf_counter() - started
        if elapsed >= budget / 4 or number >= 1 << 22:
            break
        number *= 2
    return max(1, int(number * budget / max(elapsed, 1e-9)))


async def seconds_per_call(call: Callable[[], Awaitable[Any]], number: int) -> float:
    """One timed round: ``number`` calls in a loop, the mean time of one."""
    gc.collect()
    started = time.perf_counter()
    for _ in range(number):
        await call()
    return (time.perf_counter() - started) / number


async def calls_per_second(
    call: Callable[[int], Awaitable[Any]], *, tasks: int, total: int
) -> float:
    """One timed round: ``tasks`` tasks share ``total`` calls; each takes every ``tasks``-th."""

    async def worker(start: int) -> None:
        for index in range(start, total, tasks):
            await call(index)

    gc.collect()
    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    return total / (time.perf_counter() - started)


def make_text(size: int) -> str:
    base = "My order arrived damaged and I would like my money back, please advise. "
    return (base * (size // len(base) + 1))[:size]


# A "library" is something that can build a cached function and tear it down.
Setup = Callable[[], Awaitable[tuple[Callable[..., Awaitable[Any]], Callable[[], Awaitable[None]]]]]


async def _model(text: str, questions: tuple[str, ...]) -> list[bool]:
    return [len(text) % (i + 2) == 0 for i in range(len(questions))]


def memory_setups() -> dict[str, Setup]:
    """A cached ``_model`` on an in-process store, per library."""

    async def asyncache_memory() -> Any:
        from asyncache import DecisionCache, cached_prediction

        cache = DecisionCache(fingerprint="bench")
        return cached_prediction(cache, namespace="bench")(_model), cache.aclose

    async def cashews_memory() -> Any:
        from cashews import Cache

        cache = Cache()
        cache.setup("mem://")
        return cache(ttl="1h")(_model), cache.close

    async def aiocache_memory() -> Any:
        from aiocache import Cache, cached

        decorator = cached(ttl=3600, cache=Cache.MEMORY)
        function = decorator(_model)
        return function, decorator.cache.close

    async def async_lru_memory() -> Any:
        from async_lru import alru_cache

        function = alru_cache(maxsize=None)(_model)

        async def close() -> None:
            function.cache_clear()

        return function, close

    return {
        "asyncache": asyncache_memory,
        "cashews": cashews_memory,
        "aiocache": aiocache_memory,
        "async-lru": async_lru_memory,
    }


def redis_setups(url: str, host: str, port: int) -> dict[str, Setup]:
    """A cached ``_model`` on Redis, per library, and ``redis-py GET`` alone.

    Each client may open up to ``POOL`` connections (asyncache's default is 64).
    """

    async def asyncache_redis() -> Any:
        from asyncache import DecisionCache, cached_prediction
        from asyncache.stores.redis import RedisStore

        store = RedisStore.from_url(url, prefix="report:asyncache:", max_connections=POOL)
        cache = DecisionCache(store, fingerprint="bench")
        return cached_prediction(cache, namespace="bench")(_model), cache.aclose

    async def cashews_redis() -> Any:
        from cashews import Cache

        cache = Cache()
        cache.setup(f"{url}/0", client_side=False, suppress=False, max_connections=POOL)
        return cache(ttl="1h", prefix="report-cashews")(_model), cache.close

    async def aiocache_redis() -> Any:
        from aiocache import Cache, cached

        decorator = cached(
            ttl=3600,
            cache=Cache.REDIS,
            endpoint=host,
            port=port,
            namespace="report-aiocache",
            pool_max_size=POOL,
        )
        return decorator(_model), decorator.cache.close

    async def raw_get() -> Any:
        from redis.asyncio import Redis

        client = Redis.from_url(url, max_connections=POOL)
        value = b"\x10" + json.dumps({"v": [True, False], "t": None, "c": 0, "d": 0}).encode()
        await client.set("report:raw", value)

        async def get(text: str, questions: tuple[str, ...]) -> bytes | None:
            return await client.get("report:raw")  # type: ignore[no-any-return]

        return get, client.aclose

    return {
        "asyncache": asyncache_redis,
        "cashews": cashews_redis,
        "aiocache": aiocache_redis,
        "redis-py GET (driver alone)": raw_get,
    }


def cluster_setups(url: str) -> dict[str, Setup]:
    """A cached ``_model`` on Redis Cluster, and redis-py's cluster ``GET`` alone."""

    async def asyncache_cluster() -> Any:
        from asyncache import DecisionCache, cached_prediction
        from asyncache.stores.redis import RedisStore

        store = RedisStore.from_url(url, prefix="report:asyncache:", max_connections=POOL)
        cache = DecisionCache(store, fingerprint="bench")
        return cached_prediction(cache, namespace="bench")(_model), cache.aclose

    async def raw_cluster_get() -> Any:
        from redis.asyncio.cluster import RedisCluster

        first = url.removeprefix("redis+cluster://").split(",")[0]
        client = RedisCluster.from_url(f"redis://{first}", max_connections=POOL)
        value = b"\x10" + json.dumps({"v": [True, False], "t": None, "c": 0, "d": 0}).encode()
        names = [f"report:raw:{i}" for i in range(256)]  # spread over the slots
        for name in names:
            await client.set(name, value)
        turn = iter(range(1 << 62))

        async def get(text: str, questions: tuple[str, ...]) -> bytes | None:
            return await client.get(names[next(turn) % 256])  # type: ignore[no-any-return]

        return get, client.aclose

    return {"asyncache": asyncache_cluster, "redis-py cluster GET (driver alone)": raw_cluster_get}


@contextmanager
def redis_cluster() -> Iterator[str | None]:
    """A private 3-master Redis Cluster's ``redis+cluster://`` URL, or None without one."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        yield None
        return
    sys.path.insert(0, str(ROOT))
    from tests.servers import start_cluster

    with tempfile.TemporaryDirectory(prefix="asyncache-report-cluster-") as workdir:
        cluster = start_cluster(server, cli, Path(workdir))
        try:
            yield cluster.url
        finally:
            cluster.stop()


def sqlite_setups(directory: Path) -> dict[str, Setup]:
    """A cached ``_model`` on SQLite, and an aiosqlite ``execute_fetchall`` alone."""

    async def asyncache_sqlite() -> Any:
        from asyncache import DecisionCache, cached_prediction
        from asyncache.stores.sqlite import SQLiteStore

        store = SQLiteStore(directory / "asyncache.sqlite")
        cache = DecisionCache(store, fingerprint="bench")
        return cached_prediction(cache, namespace="bench")(_model), cache.aclose

    async def raw_select() -> Any:
        import aiosqlite

        db = await aiosqlite.connect(directory / "raw.sqlite")
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("CREATE TABLE IF NOT EXISTS t (key BLOB PRIMARY KEY, value BLOB)")
        await db.execute("INSERT OR REPLACE INTO t VALUES (?, ?)", (b"k" * 16, b"v" * 40))
        await db.commit()

        async def select(text: str, questions: tuple[str, ...]) -> Any:
            return await db.execute_fetchall("SELECT value FROM t WHERE key = ?", (b"k" * 16,))

        return select, db.close

    return {"asyncache": asyncache_sqlite, "aiosqlite SELECT (driver alone)": raw_select}


@dataclass
class Series:
    """Measurements for the charts: library -> x -> value."""

    title: str
    unit: str
    xs: tuple[int, ...]
    values: dict[str, dict[int, float]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    note: str = ""


Opened = dict[str, tuple[Callable[..., Awaitable[Any]], Callable[[], Awaitable[None]]]]


async def open_all(setups: dict[str, Setup], series: Series) -> Opened:
    """Every library's cached function; one that cannot start is recorded as an error."""
    opened: Opened = {}
    for name, setup in setups.items():
        try:
            opened[name] = await setup()
        except Exception as exc:  # a peer missing from this environment, a server refusing
            series.errors[name] = f"{type(exc).__name__}: {exc}"
    return opened


async def close_all(opened: Opened) -> None:
    for _, close in opened.values():
        with contextlib.suppress(Exception):
            await close()


async def interleaved(
    series: Series,
    rounds: dict[str, Callable[[], Awaitable[float]]],
    repeats: int,
) -> dict[str, float]:
    """Median of ``repeats`` rounds per library, the libraries taking turns in each repeat.

    Taking turns spreads any change in the machine's load over every library
    alike, so the ratios stay fair on a busy machine.
    """
    samples: dict[str, list[float]] = {name: [] for name in rounds}
    for _ in range(repeats):
        for name, measure in rounds.items():
            if name in series.errors:
                continue
            try:
                samples[name].append(await measure())
            except Exception as exc:
                series.errors[name] = f"{type(exc).__name__}: {exc}"
    return {
        name: median(values)
        for name, values in samples.items()
        if values and name not in series.errors
    }


async def hit_latency_by_size(repeats: int, budget: float) -> Series:
    series = Series("Hit latency by input size (in-process memory stores)", "µs", SIZES)
    opened = await open_all(memory_setups(), series)
    try:
        for size in SIZES:
            text = make_text(size)
            rounds: dict[str, Callable[[], Awaitable[float]]] = {}
            for name, (function, _) in opened.items():
                if name in series.errors:
                    continue

                async def call(function: Any = function, text: str = text) -> Any:
                    return await function(text, QUESTIONS)

                try:
                    number = await calibrate(call, budget)
                except Exception as exc:
                    series.errors[name] = f"{type(exc).__name__}: {exc}"
                    continue
                rounds[name] = functools.partial(seconds_per_call, call, number)
            for name, value in (await interleaved(series, rounds, repeats)).items():
                series.values.setdefault(name, {})[size] = value
    finally:
        await close_all(opened)
    return series


async def throughput_by_concurrency(
    title: str, setups: dict[str, Setup], *, keys: int, total: int, repeats: int, note: str = ""
) -> Series:
    series = Series(title, "hits/s", CONCURRENCY, note=note)
    texts = [make_text(140)[:-6] + f"{i:06d}" for i in range(keys)]
    opened = await open_all(setups, series)
    try:
        calls: dict[str, Callable[[int], Awaitable[Any]]] = {}
        for name, (function, _) in opened.items():

            async def call(index: int, function: Any = function) -> Any:
                return await function(texts[index % keys], QUESTIONS)

            try:
                for text in texts:  # fill: every timed call is a hit
                    await function(text, QUESTIONS)
                await calls_per_second(call, tasks=8, total=total // 4)  # warm up
            except Exception as exc:
                series.errors[name] = f"{type(exc).__name__}: {exc}"
                continue
            calls[name] = call
        for tasks in CONCURRENCY:
            rounds = {
                name: functools.partial(calls_per_second, call, tasks=tasks, total=total)
                for name, call in calls.items()
            }
            for name, value in (await interleaved(series, rounds, repeats)).items():
                series.values.setdefault(name, {})[tasks] = value
    finally:
        await close_all(opened)
    return series


@contextmanager
def redis_server() -> Iterator[tuple[str, str, int] | None]:
    """A private redis-server on a free loopback port, or None without the binary."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    sys.path.insert(0, str(ROOT))
    from tests.servers import RedisServer

    with tempfile.TemporaryDirectory(prefix="asyncache-report-redis-") as workdir:
        server = RedisServer(binary, Path(workdir))
        server.start()
        try:
            yield server.url, "127.0.0.1", server.port
        finally:
            server.stop()


async def measure_here(quick: bool) -> tuple[list[Series], list[str]]:
    """The series this script measures itself; notes on what could not be measured."""
    repeats = 3 if quick else 7
    budget = 0.02 if quick else 0.1
    total = 2_000 if quick else 20_000
    notes: list[str] = []
    series = [await hit_latency_by_size(repeats, budget)]
    log("measured hit latency by size")
    series.append(
        await throughput_by_concurrency(
            "Hit throughput by concurrency: memory",
            memory_setups(),
            keys=256,
            total=total * 5,
            repeats=repeats,
        )
    )
    log("measured memory throughput")
    with tempfile.TemporaryDirectory(prefix="asyncache-report-sqlite-") as directory:
        try:
            series.append(
                await throughput_by_concurrency(
                    "Hit throughput by concurrency: SQLite",
                    sqlite_setups(Path(directory)),
                    note="asyncache: SQLiteStore with its defaults (WAL, synchronous=NORMAL). "
                    "Driver alone: one aiosqlite connection running one SELECT by primary key.",
                    keys=256,
                    total=total // 2,
                    repeats=repeats,
                )
            )
            log("measured SQLite throughput")
        except ImportError as exc:
            notes.append(f"SQLite throughput not measured: {exc}")
    with redis_server() as redis:
        if redis is None:
            notes.append("Redis throughput not measured: redis-server is not on PATH.")
        else:
            url, host, port = redis
            series.append(
                await throughput_by_concurrency(
                    "Hit throughput by concurrency: Redis (loopback)",
                    redis_setups(url, host, port),
                    note=f"Every client may open up to {POOL} connections (asyncache's default "
                    "is 64), so none waits for a free one. Driver alone: redis-py GET of one key. "
                    "asyncache sends the gets of one loop turn as one MGET (auto-pipelining).",
                    keys=256,
                    total=total // 2,
                    repeats=repeats,
                )
            )
            log("measured Redis throughput")
    with redis_cluster() as cluster_url:
        if cluster_url is None:
            notes.append(
                "Redis Cluster throughput not measured: redis-server or redis-cli missing."
            )
        else:
            series.append(
                await throughput_by_concurrency(
                    "Hit throughput by concurrency: Cluster (Redis Cluster, 3 masters, loopback)",
                    cluster_setups(cluster_url),
                    note=f"Every client may open up to {POOL} connections per node. Driver "
                    "alone: redis-py's cluster client GET over 256 keys spread across the slots. "
                    "asyncache sends the gets of one loop turn as one MGET per hash slot.",
                    keys=256,
                    total=total // 2,
                    repeats=repeats,
                )
            )
            log("measured Redis Cluster throughput")
    return series, notes


# -- charts -------------------------------------------------------------------


def chart(
    series: Series, path: Path, *, log_y: bool, xlabel: str, ylabel: str, scale: float = 1.0
) -> bool:
    """Draw ``series`` as one line per library; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(figsize=(7, 4), dpi=110)
    for name, values in series.values.items():
        xs = [x for x in series.xs if x in values]
        style = "-o" if name == "asyncache" else "--o" if "driver alone" in name else "-s"
        width = 2.0 if name == "asyncache" else 1.2
        axes.plot(xs, [values[x] * scale for x in xs], style, label=name, linewidth=width)
    axes.set_xscale("log")
    if log_y:
        axes.set_yscale("log")
    axes.set_xticks(list(series.xs))
    axes.set_xticklabels([f"{x:,}" for x in series.xs])
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(series.title, fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return True


def series_table(series: Series, *, latency: bool) -> str:
    names = list(series.values)
    header = (
        ["Library"]
        + [f"{x:,} chars" if latency else f"{x} tasks" for x in series.xs]
        + ["ratio (> 1: asyncache faster)"]
    )
    base = series.values.get("asyncache", {})
    rows: list[list[str]] = []
    for name in names:
        values = series.values[name]
        cells = [f"**{name}**" if name == "asyncache" else name]
        for x in series.xs:
            value = values.get(x)
            if value is None:
                cells.append("n/a")
            elif latency:
                cells.append(f"{fmt_us(value)} µs")
            else:
                cells.append(f"{value:,.0f}")
        ratios = []
        for x in series.xs:
            if x in values and x in base and base[x] > 0:
                # A ratio above 1 always means asyncache is faster.
                ratios.append(values[x] / base[x] if latency else base[x] / values[x])
        cells.append(
            "1.00x" if name == "asyncache" else fmt_ratio(median(ratios) if ratios else None)
        )
        rows.append(cells)
    for name, error in series.errors.items():
        rows.append([name] + ["failed"] * len(series.xs) + [fmt_number(error)])
    return table(header, rows)


# -- the scripts --------------------------------------------------------------


@dataclass
class ScriptRun:
    name: str
    title: str
    command: list[str]
    status: str  # "ok", "missing", "failed", "timed out"
    seconds: float = 0.0
    data: Any = None
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None


def script_flags(path: Path) -> str:
    try:
        result = subprocess.run(
            [sys.executable, str(path), "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=script_env(),
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout + result.stderr


def script_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def merge_runs(runs: list[Any]) -> Any:
    """One document from several runs of the same script: the median of every number."""
    first = runs[0]
    if all(isinstance(run, bool) for run in runs) or not runs:
        return first
    if all(isinstance(run, int | float) and not isinstance(run, bool) for run in runs):
        value = median([float(run) for run in runs])
        return (
            int(value)
            if all(isinstance(run, int) for run in runs) and value.is_integer()
            else value
        )
    if all(isinstance(run, dict) for run in runs) and all(
        run.keys() == first.keys() for run in runs
    ):
        return {key: merge_runs([run[key] for run in runs]) for key in first}
    if all(isinstance(run, list) for run in runs) and all(len(run) == len(first) for run in runs):
        return [merge_runs([run[i] for run in runs]) for i in range(len(first))]
    return first


def run_script(
    name: str, title: str, *, quick: bool, runs: int, timeout: float, workdir: Path
) -> ScriptRun:
    path = BENCHMARKS / f"{name}.py"
    if not path.exists():
        return ScriptRun(name, title, [], "missing")
    flags = script_flags(path)
    command = [sys.executable, str(path.relative_to(ROOT)), *SCRIPT_ARGS.get(name, [])]
    if quick and "--quick" in flags:
        command.append("--quick")
    use_json = "--json" in flags
    documents: list[Any] = []
    run = ScriptRun(name, title, command, "ok")
    started = time.perf_counter()
    for attempt in range(runs):
        json_path = workdir / f"{name}-{attempt}.json"
        full = command + (["--json", str(json_path)] if use_json else [])
        log(f"running {shlex.join(full)}")
        try:
            result = subprocess.run(
                full,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=ROOT,
                env=script_env(),
            )
        except subprocess.TimeoutExpired as exc:
            run.status = "timed out"
            output = exc.stderr or exc.stdout or b""
            text = output.decode(errors="replace") if isinstance(output, bytes) else output
            run.stderr = f"{text}\n(report) stopped after the {timeout:.0f} s limit (--timeout)"
            break
        run.stdout, run.stderr, run.returncode = result.stdout, result.stderr, result.returncode
        if result.returncode != 0:
            run.status = "failed"
            break
        if use_json:
            try:
                documents.append(json.loads(json_path.read_text()))
            except (OSError, ValueError) as exc:
                run.status = "failed"
                run.stderr += f"\n(report) could not read {json_path.name}: {exc}"
                break
    run.seconds = time.perf_counter() - started
    if run.status == "ok" and documents:
        run.data = merge_runs(documents)
    return run


# Rendering a script's JSON. The scripts are written by different people, so
# the renderer accepts the shapes they produce: a list of row objects is a
# table; an object with "columns" and "rows" is a table; an object with
# "tables" holds several; scalars become a two-column table; anything else is
# shown as JSON.


def render_value(value: Any) -> str:
    if isinstance(value, dict | list):
        return fmt_number(json.dumps(value, separators=(",", ":"))[:80])
    return fmt_number(value)


def render_rows(rows: list[dict[str, Any]]) -> str:
    columns: list[str] = []
    for row in rows:
        for name in row:
            if name not in columns:
                columns.append(name)
    return table(columns, [[render_value(row.get(name, "")) for name in columns] for row in rows])


def render_notes(data: dict[str, Any]) -> list[str]:
    parts: list[str] = []
    for name in ("notes", "note"):
        note = data.get(name)
        if isinstance(note, str):
            parts.append(note)
        elif isinstance(note, list):
            parts.append("\n".join(f"- {item}" for item in note))
    return parts


def render_document(data: Any, depth: int, seen: set[str]) -> list[str]:
    """Markdown for one script's JSON; ``seen`` holds headings already shown."""
    heading = "#" * min(depth, 6)
    if isinstance(data, list) and data and all(isinstance(row, dict) for row in data):
        return [render_rows(data)]
    if isinstance(data, list):
        return ["```json\n" + json.dumps(data, indent=2)[:4000] + "\n```"]
    if not isinstance(data, dict):
        return [fmt_number(data)]
    parts: list[str] = []
    title = data.get("title")
    if isinstance(title, str) and title not in seen:
        parts.append(f"{heading} {title}")
        seen.add(title)
        depth += 1
    if isinstance(data.get("description"), str):
        parts.append(data["description"])
    if "columns" in data and "rows" in data:
        rows = data["rows"]
        if rows and isinstance(rows[0], dict):
            parts.append(render_rows(rows))
        else:
            columns = [str(column) for column in data["columns"]]
            parts.append(table(columns, [[render_value(cell) for cell in row] for row in rows]))
        return parts + render_notes(data)
    meta = {"title", "command", "machine", "date", "note", "notes", "description"}
    scalars = {
        name: value
        for name, value in data.items()
        if name not in meta and not isinstance(value, dict | list)
    }
    if scalars:
        parts.append(
            table(["Measure", "Value"], [[name, render_value(v)] for name, v in scalars.items()])
        )
    for name, value in data.items():
        if name in meta or not isinstance(value, dict | list) or not value:
            continue
        if not (isinstance(value, dict) and isinstance(value.get("title"), str)):
            parts.append(f"{'#' * min(depth, 6)} {name.replace('_', ' ')}")
        parts.extend(render_document(value, depth, seen))
    return parts + render_notes(data)


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def render_script(run: ScriptRun) -> list[str]:
    parts = [f"### {run.title}", ""]
    if run.status == "missing":
        parts.append(f"`benchmarks/{run.name}.py` is not in this checkout: not measured.")
        return parts
    parts.append(f"`{shlex.join(['python', *run.command[1:]])}` ({run.seconds:.0f} s)")
    parts.append("")
    if run.status != "ok":
        code = f", exit code {run.returncode}" if run.returncode is not None else ""
        parts.append(f"**Not measured: the script {run.status}{code}.** The end of its output:")
        parts.append("")
        parts.append(
            "```text\n" + (tail(run.stderr) or tail(run.stdout) or "(no output)") + "\n```"
        )
        return parts
    if run.data is not None:
        # The script's own title repeats this section's heading: show it as text.
        title = run.data.get("title") if isinstance(run.data, dict) else None
        if isinstance(title, str):
            parts.append(f"*{title}*\n")
        seen = {title} if isinstance(title, str) else set()
        parts.extend(part + "\n" for part in render_document(run.data, 4, seen))
    else:
        parts.append("The script has no `--json`; its output as printed:")
        parts.append("")
        parts.append("```text\n" + (run.stdout.strip() or "(no output)") + "\n```")
    return parts


# -- the page -----------------------------------------------------------------


def render_page(
    *,
    command: str,
    started: datetime.datetime,
    seconds: float,
    info: dict[str, str],
    series: list[Series],
    notes: list[str],
    charts: dict[str, str],
    scripts: list[ScriptRun],
    quick: bool,
) -> str:
    out: list[str] = [
        "# Performance",
        "",
        "<!-- Generated by benchmarks/report.py: edit that script, not this page. -->",
        "",
        "Every number here comes from one run of one command on the machine below.",
        "Each figure is a median over repeats within that run; libraries compared in",
        "one table were measured in the same run, one after the other. Ratios above",
        "1 mean asyncache is faster. Rerun the command on your hardware before",
        "relying on a number.",
        "",
    ]
    if quick:
        out += [
            '!!! warning "Quick run"',
            "    This page was produced with `--quick`: fewer iterations and repeats.",
            "    Its numbers are noisier than a full run's.",
            "",
        ]
    out += [
        "## Run",
        "",
        table(
            ["", ""],
            [
                ["Command", f"`{command}`"],
                ["Date", started.strftime("%Y-%m-%d %H:%M UTC")],
                ["Duration", f"{seconds / 60:.1f} min"],
            ]
            + [[name, value] for name, value in info.items()],
        ),
        "",
        "## Hits beside the libraries you know",
        "",
        "Measured by `benchmarks/report.py` itself. The cached function takes a text",
        "and two short questions and returns two booleans; every timed call is a hit.",
        "asyncache's key includes the whole text (canonical JSON, BLAKE2b); async-lru",
        "keys on the arguments' Python hash, which CPython caches on the string",
        "object, so its cost does not grow with the text.",
        "",
    ]
    for s in series:
        latency = s.unit == "µs"
        out += [f"### {s.title}", ""]
        if latency:
            out += ["Median time per hit, one task calling in a loop.", ""]
        else:
            out += [
                "Hits per second with N tasks sharing the calls, over 256 hot keys. A",
                "memory hit never suspends, so tasks do not overlap there; SQLite and Redis",
                'hits wait on I/O, and concurrent tasks overlap their waits. "Driver alone"',
                "is the raw driver reading one stored value, with no cache library around it.",
                "",
            ]
        if s.note:
            out += [s.note, ""]
        out += [series_table(s, latency=latency), ""]
        if s.title in charts:
            out += [f"![{s.title}]({charts[s.title]})", ""]
        if s.title == "Hit throughput by concurrency: SQLite":
            out += ["#### SQLiteStore on aiosqlite: before and after", "", SQLITE_BEFORE_AFTER, ""]
    for note in notes:
        out += [f"- {note}"]
    if notes:
        out.append("")
    out += [
        "## Benchmark scripts",
        "",
        "Each script in `benchmarks/` measures one part against its peers and the raw drivers.",
        "They ran as subprocesses of this report, one after the other.",
        "",
    ]
    for run in scripts:
        out += render_script(run)
        out.append("")
    out += [
        "## Reproduce",
        "",
        "```bash",
        "pip install -e '.[all]' --group bench    # or scripts/test once, which makes .venv",
        "python benchmarks/report.py              # writes this page and docs/img/*.png",
        "python benchmarks/report.py --quick      # a faster, noisier run",
        "python benchmarks/hit_path.py            # any one script prints its own table",
        "```",
        "",
        "The scripts start their own redis-server on a free loopback port when",
        "`redis-server` is on PATH; without it, the Redis rows are reported as not",
        "measured.",
        "",
    ]
    return "\n".join(out)


def run_named(args: argparse.Namespace, name: str, title: str, workdir: Path) -> ScriptRun:
    """``run_script`` with the command line's --quick, --runs and --timeout."""
    return run_script(
        name, title, quick=args.quick, runs=max(1, args.runs), timeout=args.timeout, workdir=workdir
    )


def splice(args: argparse.Namespace, command: str, started: datetime.datetime) -> int:
    """Run the ``--only`` scripts and put their sections into the page as it is.

    Each section (from its ``### title`` to the next heading of level 3 or less)
    is replaced; one the page lacks goes before the next script's section (in
    ``SCRIPTS`` order) or before ``## Reproduce``. The rest of the page is kept
    byte for byte: its own run's numbers stay as that run measured them.
    """
    unknown = [name for name in args.only if name not in dict(SCRIPTS)]
    if unknown:
        raise SystemExit(f"unknown scripts: {', '.join(unknown)}")
    page = args.out.read_text()
    load_at_start = load_average()
    with tempfile.TemporaryDirectory(prefix="asyncache-report-") as workdir:
        for name, title in SCRIPTS:
            if name not in args.only:
                continue
            lines = render_script(run_named(args, name, title, Path(workdir)))
            lines[1:1] = [
                "",
                f"Run on its own and spliced into this page by `{command}` "
                f"({started:%Y-%m-%d %H:%M} UTC; load average (1/5/15 min) at start "
                f"{load_at_start}, at end {load_average()}); the rest of the page is "
                "from the run named at its top.",
            ]
            page = splice_section(page, name, "\n".join(lines).rstrip("\n") + "\n\n")
    args.out.write_text(page)
    log(f"spliced {', '.join(args.only)} into {args.out}")
    return 0


def splice_section(page: str, name: str, section: str) -> str:
    """``page`` with script ``name``'s section replaced by (or given) ``section``."""
    titles = dict(SCRIPTS)
    lines = page.splitlines(keepends=True)
    heading = f"### {titles[name]}\n"

    def end_of(start: int) -> int:
        for index in range(start + 1, len(lines)):
            if lines[index].startswith(("# ", "## ", "### ")):
                return index
        return len(lines)

    if heading in lines:
        start = lines.index(heading)
        return "".join(lines[:start]) + section + "".join(lines[end_of(start) :])
    order = [script for script, _ in SCRIPTS]
    later = [f"### {titles[other]}\n" for other in order[order.index(name) + 1 :]]
    for index, line in enumerate(lines):
        if line in later or line == "## Reproduce\n":
            return "".join(lines[:index]) + section + "".join(lines[index:])
    return page.rstrip("\n") + "\n\n" + section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (noisier)")
    parser.add_argument(
        "--runs", type=int, default=1, help="run each script N times and take medians (default 1)"
    )
    parser.add_argument("--only", nargs="*", help="run only these scripts (by name)")
    parser.add_argument(
        "--splice",
        action="store_true",
        help="with --only: replace those scripts' sections in the existing page (--out) and "
        "leave every other byte of it as it is",
    )
    parser.add_argument("--no-scripts", action="store_true", help="only this file's measurements")
    parser.add_argument("--no-measure", action="store_true", help="only the scripts")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per script run")
    parser.add_argument("--out", type=Path, default=DEFAULT_PAGE, help="the page to write")
    parser.add_argument("--img-dir", type=Path, default=DEFAULT_IMAGES, help="where charts go")
    args = parser.parse_args(argv)

    started = datetime.datetime.now(datetime.UTC)
    clock = time.perf_counter()
    command = shlex.join(
        ["python", "benchmarks/report.py", *(sys.argv[1:] if argv is None else argv)]
    )
    if args.splice:
        if not args.only:
            parser.error("--splice needs --only (the sections to run again)")
        return splice(args, command, started)
    info = machine()
    series: list[Series] = []
    notes: list[str] = []
    if not args.no_measure:
        series, notes = asyncio.run(measure_here(args.quick))
    charts: dict[str, str] = {}
    relative = os.path.relpath(args.img_dir, args.out.parent)
    for s in series:
        if not s.values:
            notes.append(f"{s.title}: nothing measured.")
            continue
        latency = s.unit == "µs"
        # "Hit throughput by concurrency: Redis (loopback)" -> throughput_redis.png
        name = "hit_latency_by_size.png"
        if not latency:
            name = "throughput_" + s.title.split(":")[-1].split()[0].lower() + ".png"
        drawn = chart(
            s,
            args.img_dir / name,
            log_y=True,
            xlabel="input characters" if latency else "concurrent tasks",
            ylabel="µs per hit" if latency else "hits per second",
            scale=1e6 if latency else 1.0,  # latencies are kept in seconds
        )
        if drawn:
            charts[s.title] = f"{relative}/{name}"
    scripts: list[ScriptRun] = []
    if not args.no_scripts:
        with tempfile.TemporaryDirectory(prefix="asyncache-report-") as workdir:
            for name, title in SCRIPTS:
                if args.only and name not in args.only:
                    continue
                scripts.append(run_named(args, name, title, Path(workdir)))
    # Other work on the machine slows every number: say how busy it was at both ends.
    ordered: dict[str, str] = {}
    for key, value in info.items():
        ordered[key] = value
        if key.startswith("Load average at start"):
            ordered["Load average at end (1/5/15 min)"] = load_average()
    info = ordered
    page = render_page(
        command=command,
        started=started,
        seconds=time.perf_counter() - clock,
        info=info,
        series=series,
        notes=notes,
        charts=charts,
        scripts=scripts,
        quick=args.quick,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(page)
    log(f"wrote {args.out}")
    failed = [run.name for run in scripts if run.status in ("failed", "timed out")]
    if failed:
        log(f"scripts that did not finish: {', '.join(failed)} (reported on the page)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
