"""Freshness beyond a ttl, through every door and on every store.

Doors: a single call of ``@cached_prediction``, ``.many()`` and a micro-batched
call (``batch=True``); the middleware's are in ``tests/middleware``. Stores:
memory, SQLite, memory over SQLite, Redis, Redis Cluster and memory over Redis,
each a real one (a file of the test's own, a redis-server on a free port).
Entries are made stale by waiting out a short ttl; what is asserted is what
callers got and how often the model ran, never how long anything took.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from asyncache import DecisionCache, cached_prediction, open_store
from asyncache.codec import decode, encode
from asyncache.stores import DecisionStore

from ..stores.test_contract import store_of
from ..support import GENEROUS_REDIS_TIMEOUTS, until

STORES = ["memory", "sqlite", "tiered-sqlite", "redis", "redis-cluster", "tiered-redis"]
DOORS = ["single", "many", "batch"]
TTL = 0.2
# A hang guard: a caller that waited for the (held) model would never finish.
HANG = 30.0
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DecisionStore]:
    async with store_of(request.param, request, tmp_path) as made:
        yield made


class Model:
    """A model whose answers are numbered by run; it may be held, or made to fail."""

    def __init__(self) -> None:
        self.runs = 0
        self.gate: asyncio.Event | None = None
        self.failure: BaseException | None = None

    async def __call__(self, x: int) -> str:
        self.runs += 1
        run = self.runs
        if self.gate is not None:
            await self.gate.wait()
        if self.failure is not None:
            raise self.failure
        return f"{x}:run{run}"


def door(kind: str, cache: DecisionCache, model: Model) -> Callable[[int], Awaitable[str]]:
    """How a caller asks for ``x`` through the door ``kind``."""
    if kind == "single":

        @cached_prediction(cache, namespace="fresh")
        async def predict(x: int) -> str:
            return await model(x)

        return predict

    @cached_prediction(cache, namespace="fresh", batch=True, max_wait_ms=1.0)
    async def predict_batch(items: list[int]) -> list[str]:
        return [await model(x) for x in items]

    if kind == "batch":
        return predict_batch  # type: ignore[return-value]

    async def many(x: int) -> str:
        [answer] = await predict_batch.many([x])
        return answer  # type: ignore[no-any-return]

    return many


async def _stale(cache: DecisionCache, ask: Callable[[int], Awaitable[str]], x: int) -> str:
    """Store a decision for ``x`` and wait out its ttl."""
    first = await ask(x)
    await asyncio.sleep(TTL * 1.5)
    return first


@pytest.mark.parametrize("kind", DOORS)
async def test_a_stale_hit_returns_at_once_with_one_refresh(
    store: DecisionStore, kind: str
) -> None:
    cache = DecisionCache(store, ttl=TTL, stale_while_revalidate=60, store_timeout=30)
    model = Model()
    ask = door(kind, cache, model)
    first = await _stale(cache, ask, 1)
    model.gate = asyncio.Event()  # the refresh cannot finish: no caller may wait for it
    answers = await asyncio.wait_for(asyncio.gather(*(ask(1) for _ in range(50))), HANG)
    assert answers == [first] * 50
    await until(lambda: model.runs == 2)  # the first decision, and one refresh
    stats = cache.stats()
    assert stats["stale_hits"] == 50 and stats["refreshes"] == 1
    model.gate.set()
    await until(lambda: len(cache.engine.flights) == 0)
    assert await ask(1) == "1:run2"  # the refreshed decision replaced the stale one
    assert model.runs == 2
    await cache.aclose()


@pytest.mark.parametrize("kind", DOORS)
async def test_a_failing_refresh_serves_stale_until_the_window_ends(
    store: DecisionStore, kind: str
) -> None:
    window = 2.0
    cache = DecisionCache(store, ttl=TTL, stale_while_revalidate=window, store_timeout=30)
    model = Model()
    ask = door(kind, cache, model)
    first = await _stale(cache, ask, 2)
    model.failure = RuntimeError("the model is down")
    assert await ask(2) == first
    await until(lambda: cache.stats()["refresh_failures"] >= 1)
    assert await ask(2) == first  # still served, and refreshed again
    await asyncio.sleep(TTL + window)  # past the window: gone
    with pytest.raises(RuntimeError, match="the model is down"):
        await ask(2)
    await cache.aclose()


@pytest.mark.parametrize("kind", DOORS)
@pytest.mark.parametrize("failure", ["raises", "times out"])
async def test_stale_if_error_answers_a_failed_computation(
    store: DecisionStore, kind: str, failure: str
) -> None:
    cache = DecisionCache(store, ttl=TTL, stale_if_error=60, store_timeout=30)
    model = Model()
    ask = door(kind, cache, model)
    first = await _stale(cache, ask, 3)
    if failure == "raises":
        model.failure = RuntimeError("the model is down")
    else:
        model.failure = TimeoutError("the model did not answer in time")
    assert await ask(3) == first
    assert cache.stats()["stale_if_error_hits"] == 1
    model.failure = None
    assert await ask(3) == "3:run3"  # within stale-if-error every call computes...
    assert await ask(3) == "3:run3"  # ...and what it computed replaced the stale entry
    assert model.runs == 3
    await cache.aclose()


@pytest.mark.parametrize("kind", DOORS)
async def test_a_cached_error_is_raised_again_without_the_model(
    store: DecisionStore, kind: str
) -> None:
    cache = DecisionCache(store, cache_errors=(ValueError,), error_ttl=1.5, store_timeout=30)
    model = Model()
    ask = door(kind, cache, model)
    model.failure = ValueError("not a sentence")
    with pytest.raises(ValueError, match="not a sentence"):
        await ask(4)
    for _ in range(3):
        with pytest.raises(ValueError, match="not a sentence"):
            await ask(4)
    assert model.runs == 1
    assert cache.stats()["error_hits"] == 3
    model.failure = None
    await asyncio.sleep(1.6)  # past error_ttl: the model runs again
    assert await ask(4) == "4:run2"
    await cache.aclose()


async def test_errors_not_listed_and_cancellation_are_never_cached() -> None:
    cache = DecisionCache(cache_errors=(ValueError,))
    model = Model()
    ask = door("single", cache, model)
    model.failure = KeyError("other")
    for _ in range(2):
        with pytest.raises(KeyError):
            await ask(5)
    assert model.runs == 2
    model.failure = asyncio.CancelledError()
    with pytest.raises(asyncio.CancelledError):
        await ask(6)
    model.failure = None
    assert await ask(6) == "6:run4"
    await cache.aclose()


async def test_jitter_spreads_the_stored_expiries(store: DecisionStore) -> None:
    ttl, jitter = 1000.0, 0.2
    cache = DecisionCache(store, ttl=ttl, jitter=jitter, store_timeout=30)
    keys = [cache.key(n) for n in range(1000)]

    async def compute(indices: list[int]) -> list[int]:
        return indices

    await cache.get_or_compute_many(keys, compute, list(range(1000)))
    entries = await store.get_many(keys)
    lifetimes = []
    for key, entry in zip(keys, entries, strict=True):
        assert entry is not None and entry.expires_at is not None
        created = decode(entry.value, key=key).created_at
        lifetimes.append(entry.expires_at - created)
    low = ttl * (1 - jitter)
    assert all(low - 1e-6 <= lifetime <= ttl + 1e-6 for lifetime in lifetimes)
    # Uniform over [800, 1000]: each fifth of the interval holds about 200 of them.
    fifths = [0] * 5
    for lifetime in lifetimes:
        fifths[min(4, int((lifetime - low) / (ttl - low) * 5))] += 1
    assert all(count > 120 for count in fifths), fifths
    await cache.aclose()


async def test_a_late_refresher_never_overwrites_a_newer_decision(store: DecisionStore) -> None:
    cache = DecisionCache(store, ttl=TTL, stale_while_revalidate=60, store_timeout=30)
    model = Model()
    ask = door("single", cache, model)
    first = await _stale(cache, ask, 7)
    model.gate = asyncio.Event()
    assert await ask(7) == first  # the refresh starts, and is held
    key = ask.key(7)  # type: ignore[attr-defined]
    stale = await store.get(key)
    assert stale is not None
    # Meanwhile another process stores a newer decision in place of the stale one.
    newer = encode("7:newer", ttl=60, created_at=time.time(), compute_seconds=0.0, key=key)
    await store.replace(key, stale.value, newer, time.time() + 60)  # type: ignore[attr-defined]
    model.gate.set()
    await until(lambda: len(cache.engine.flights) == 0)
    assert cache.stats()["conflicts"] == 1
    got = await store.get(key)
    assert got is not None and got.value == newer
    assert await ask(7) == "7:newer"
    await cache.aclose()


async def test_entries_without_windows_read_as_before(store: DecisionStore) -> None:
    """An entry an older version wrote (no "w" in its envelope) is fresh until its expiry."""
    writer = DecisionCache(store, ttl=60, store_timeout=30)
    model = Model()
    first = await door("single", writer, model)(8)
    reader = DecisionCache(store, ttl=60, stale_while_revalidate=30, stale_if_error=30)
    again = await door("single", reader, model)(8)
    assert again == first and model.runs == 1
    assert reader.stats()["stale_hits"] == 0


async def test_renewal_moves_fresh_until_and_keeps_the_windows() -> None:
    cache = DecisionCache(ttl=1.0, stale_while_revalidate=100, renew_on_hit=True)
    model = Model()
    ask = door("single", cache, model)
    await ask(9)
    key = ask.key(9)  # type: ignore[attr-defined]
    await asyncio.sleep(0.2)  # past ttl/16: the next hit renews
    await ask(9)
    await until(lambda: cache.stats()["renewals"] == 1)
    entry = await cache.store.get(key)
    assert entry is not None and entry.expires_at is not None
    remaining = entry.expires_at - time.time()
    assert 100 < remaining <= 101  # a renewed ttl, then the whole window again
    await cache.aclose()


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="stale_while_revalidate"):
        DecisionCache(stale_while_revalidate=-1)
    with pytest.raises(ValueError, match="jitter"):
        DecisionCache(jitter=1.0)
    with pytest.raises(ValueError, match="error_ttl"):
        DecisionCache(error_ttl=0)
    with pytest.raises(TypeError, match="cache_errors"):
        DecisionCache(cache_errors=(int,))  # type: ignore[arg-type]


# -- a fleet: 4 processes, 200 callers each, at the moment of expiry ------------


def _seed(url: str) -> None:
    """Store the decision the workers will find stale (their key: namespace fleet/predict)."""

    async def run() -> None:
        cache = DecisionCache(
            open_store(url),
            namespace="fleet",
            ttl=0.05,
            stale_while_revalidate=600,
            store_timeout=30,
        )

        @cached_prediction(cache, namespace="predict")
        async def predict(key: int) -> dict[str, Any]:
            return {"key": key, "pid": 0, "nonce": "seeded"}

        await predict(0)
        await cache.aclose()

    asyncio.run(run())


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_four_processes_at_expiry_run_the_model_once(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'fleet.db'}?busy_timeout=30"
    else:
        redis_url: str = request.getfixturevalue("redis_url")
        prefix: str = request.getfixturevalue("redis_prefix")
        url = f"{redis_url}?prefix={prefix}&{GENEROUS_REDIS_TIMEOUTS}"
    _seed(url)
    time.sleep(0.1)  # past the seeded ttl: stale for everyone from now on
    go = tmp_path / "go"
    names = [f"worker{i}" for i in range(4)]
    processes = []
    for name in names:
        command = [sys.executable, "-m", "tests.engine.lease_worker", "--store", url]
        command += ["--runs", str(tmp_path / "runs.log"), "--go", str(go)]
        command += ["--ready", str(tmp_path / f"{name}.ready")]
        command += ["--out", str(tmp_path / f"{name}.json"), "--signals", str(tmp_path)]
        command += ["--keys", "1", "--per-key", "200", "--compute", "0.2"]
        command += ["--ttl", "600", "--stale-while-revalidate", "600"]
        processes.append(
            subprocess.Popen(
                command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    try:
        deadline = time.monotonic() + 240
        while not all((tmp_path / f"{name}.ready").exists() for name in names):
            for process in processes:
                assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "the workers did not get ready"
            time.sleep(0.01)
        go.touch()
        outputs = [process.communicate(timeout=240)[0] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert all(process.returncode == 0 for process in processes), outputs
    reports = [json.loads((tmp_path / f"{name}.json").read_text()) for name in names]
    assert all(report["stats"]["errors"] == 0 for report in reports), outputs
    runs = (tmp_path / "runs.log").read_text().split()
    assert len(runs) // 2 == 1, (runs, reports)  # one model run for the whole fleet
    assert sum(report["calls"] for report in reports) == 800
    assert sum(report["stats"]["stale_hits"] for report in reports) > 0
    # Callers got the stale decision at once, or (once the refresh landed) the new one.
    nonces = {nonce for report in reports for nonce in report["decisions"]["0"]}
    assert "seeded" in nonces and len(nonces) <= 2


@pytest.mark.parametrize("batch", [False, True])
async def test_a_function_may_have_its_own_freshness(batch: bool) -> None:
    cache = DecisionCache(ttl=TTL)  # no windows of its own
    model, plain_model = Model(), Model()

    if batch:

        @cached_prediction(
            cache, namespace="own", batch=True, stale_while_revalidate=60, max_wait_ms=1.0
        )
        async def own_batch(items: list[int]) -> list[str]:
            return [await model(x) for x in items]

        own: Callable[[int], Awaitable[str]] = own_batch
    else:

        @cached_prediction(cache, namespace="own", stale_while_revalidate=60)
        async def own_single(x: int) -> str:
            return await model(x)

        own = own_single

    @cached_prediction(cache, namespace="plain")
    async def plain(x: int) -> str:
        return await plain_model(x)

    first, plain_first = await own(1), await plain(1)
    await asyncio.sleep(TTL * 1.5)
    model.gate = asyncio.Event()
    assert await asyncio.wait_for(own(1), HANG) == first  # stale, served at once
    assert await plain(1) != plain_first  # the cache's own settings: expired, computed
    assert cache.stats()["stale_hits"] == 1
    model.gate.set()
    await cache.aclose()


async def test_a_function_may_cache_its_own_errors() -> None:
    cache = DecisionCache()
    model = Model()

    @cached_prediction(cache, cache_errors=(ValueError,), error_ttl=60)
    async def predict(x: int) -> str:
        return await model(x)

    model.failure = ValueError("no")
    for _ in range(3):
        with pytest.raises(ValueError, match="no"):
            await predict(1)
    assert model.runs == 1
    await cache.aclose()


class CountingStore:
    """A store whose calls are counted per task (``by``), forwarding to a real one."""

    def __init__(self, inner: DecisionStore) -> None:
        self._inner = inner
        self.by: dict[asyncio.Task[Any] | None, list[str]] = {}

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(attribute):
            return attribute

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.by.setdefault(asyncio.current_task(), []).append(name)
            return await attribute(*args, **kwargs)

        return counted

    def calls(self, task: asyncio.Task[Any]) -> list[str]:
        return self.by.get(task, [])


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
@pytest.mark.parametrize("leases", [False, True])
async def test_a_stale_caller_makes_no_more_store_calls_than_a_hit(
    kind: str, leases: bool, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async with store_of(kind, request, tmp_path) as inner:
        store = CountingStore(inner)
        # Two caches over one store: the first stores a decision that goes stale, the
        # second (whose own ttl is long) stores a fresh one and asks for both.
        short = DecisionCache(inner, ttl=TTL, stale_while_revalidate=60, store_timeout=30)
        cache = DecisionCache(
            store,  # type: ignore[arg-type]
            ttl=600,
            stale_while_revalidate=60,
            leases=leases,
            store_timeout=30,
        )
        model = Model()
        ask_short, ask = door("single", short, model), door("single", cache, model)
        first = await ask_short(1)
        await ask(2)
        await asyncio.sleep(TTL * 1.5)

        async def calls_of(x: int) -> tuple[str, list[str]]:
            task = asyncio.create_task(ask(x))
            answer = await asyncio.wait_for(task, HANG)
            return answer, store.calls(task)

        hit, hit_calls = await calls_of(2)
        model.gate = asyncio.Event()  # the refresh is held: the stale caller may not wait for it
        stale, stale_calls = await calls_of(1)
        assert (hit, stale) == ("2:run2", first)
        assert cache.stats()["stale_hits"] == 1
        await until(lambda: model.runs == 3, "the refresh runs the model")
        # The refresh's own calls (its lease, its compare-and-set) are its task's.
        assert len(stale_calls) <= len(hit_calls), (stale_calls, hit_calls)
        model.gate.set()
        await until(lambda: len(cache.engine.flights) == 0, "the refresh landed")
        await short.aclose()  # each closes the store: the second close, and store_of's, do nothing
        await cache.aclose()
