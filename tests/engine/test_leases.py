"""Leases: one computation per key across processes, takeover of a dead owner's lease."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncache import DecisionCache, MemoryStore, cached_prediction, open_store
from asyncache.stores.tiered import TieredStore

from ..servers import RedisServer
from ..support import GENEROUS_REDIS_TIMEOUTS, until
from ..support.stores import lease_seconds_left, live_leases

ROOT = Path(__file__).resolve().parents[2]
# A hang guard for child processes, never a timing assertion.
CHILD_TIMEOUT = 240
# A hang guard for waits inside a test, never a timing assertion.
WAIT_TIMEOUT = 60.0
# Redis options for a loaded test machine (two copies of the suite, four workers
# each, on two cores): connecting, a command, or waiting for a pooled connection
# may take seconds, and the defaults (1-2 s) would turn that into store errors.
GENEROUS = GENEROUS_REDIS_TIMEOUTS
# The same for every store call the engine makes (its default is 1 s).
STORE_TIMEOUT = 30.0
# Redis' runs on redis-server and on Valkey (tests/conftest.py); SQLite's once.
pytestmark = pytest.mark.engines


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a store every process of a test shares."""
    if request.param == "sqlite":
        # A contended host: writers may wait long for the lock rather than fail over to computing.
        return f"sqlite:///{tmp_path / 'fleet.db'}?busy_timeout=30"
    pytest.importorskip("redis")
    redis_url: str = request.getfixturevalue("redis_url")
    prefix: str = request.getfixturevalue("redis_prefix")
    return f"{redis_url}?prefix={prefix}&{GENEROUS}"


# -- in one process: caches that share nothing but the store -----------------


def _cache(store_url: str, **options: Any) -> DecisionCache:
    """A cache with leases on a store of its own at ``store_url``."""
    return DecisionCache(open_store(store_url), leases=True, store_timeout=STORE_TIMEOUT, **options)


def _predictor(cache: DecisionCache, runs: list[str], gate: asyncio.Event | None, who: str) -> Any:
    @cached_prediction(cache, namespace="predict")
    async def predict(x: int) -> dict[str, Any]:
        runs.append(who)
        if gate is not None:
            await gate.wait()
        return {"x": x, "by": who}

    return predict


async def test_second_cache_waits_for_the_first(store_url: str) -> None:
    runs: list[str] = []
    gate = asyncio.Event()
    async with (
        _cache(store_url, lease_ttl=30) as first,
        _cache(store_url, lease_ttl=30) as second,
    ):
        a = _predictor(first, runs, gate, "first")
        b = _predictor(second, runs, None, "second")
        owner = asyncio.create_task(a(1))
        await until(lambda: runs == ["first"], within=WAIT_TIMEOUT)
        waiters = [asyncio.create_task(b(1)) for _ in range(5)]
        await until(lambda: second.stats()["lease_waits"] > 0, within=WAIT_TIMEOUT)
        assert not any(task.done() for task in waiters)
        gate.set()
        results = [await owner, *[await task for task in waiters]]
        assert runs == ["first"]
        assert all(result == {"x": 1, "by": "first"} for result in results)
        stats = second.stats()
        assert stats["lease_waits"] == 1  # one flight, so one wait for the five callers
        assert stats["lease_takeovers"] == 0
        assert stats["lease_wait_seconds"] > 0
        assert stats["errors"] == 0


async def test_exactly_one_waiter_takes_over_an_abandoned_lease(store_url: str) -> None:
    runs: list[str] = []
    key_store = open_store(store_url)
    async with (
        DecisionCache(key_store, leases=True, lease_ttl=30) as probe,
        _cache(store_url, lease_ttl=30) as b_cache,
        _cache(store_url, lease_ttl=30) as c_cache,
    ):
        key = _predictor(probe, runs, None, "probe").key(7)
        b = _predictor(b_cache, runs, None, "b")
        c = _predictor(c_cache, runs, None, "c")
        # Connected first, so that both start waiting well within the dead lease's life.
        for cache in (b_cache, c_cache):
            assert await cache.store.get(key) is None
        # An owner that took the lease and died: nobody will ever release it.
        assert await key_store.acquire_lease(key, b"dead-owner", 2.0)  # type: ignore[attr-defined]
        results = await asyncio.gather(*[b(7) for _ in range(3)], *[c(7) for _ in range(3)])
        assert len(runs) == 1
        assert len({result["by"] for result in results}) == 1
        takeovers = b_cache.stats()["lease_takeovers"] + c_cache.stats()["lease_takeovers"]
        assert takeovers == 1
        assert b_cache.stats()["lease_waits"] == 1
        assert c_cache.stats()["lease_waits"] == 1


async def test_a_tier_takes_its_leases_in_the_shared_level(tmp_path: Path) -> None:
    runs: list[str] = []
    gate = asyncio.Event()
    url = f"sqlite:///{tmp_path / 'tier.db'}"
    async with (
        DecisionCache(
            TieredStore(MemoryStore(), open_store(url)), leases=True, store_timeout=STORE_TIMEOUT
        ) as first,
        DecisionCache(
            TieredStore(MemoryStore(), open_store(url)), leases=True, store_timeout=STORE_TIMEOUT
        ) as second,
    ):
        a = _predictor(first, runs, gate, "first")
        b = _predictor(second, runs, None, "second")
        owner = asyncio.create_task(a(3))
        await until(lambda: bool(runs), within=WAIT_TIMEOUT)
        waiter = asyncio.create_task(b(3))
        await until(lambda: second.stats()["lease_waits"] > 0, within=WAIT_TIMEOUT)
        gate.set()
        assert await owner == await waiter == {"x": 3, "by": "first"}
        assert runs == ["first"]


async def test_without_coalescing_each_call_takes_the_lease(tmp_path: Path) -> None:
    runs: list[str] = []
    url = f"sqlite:///{tmp_path / 'alone.db'}"
    async with _cache(url, coalesce=False) as cache:
        predict = _predictor(cache, runs, None, "alone")
        results = await asyncio.gather(*[predict(2) for _ in range(5)])
        assert runs == ["alone"]
        assert results == [{"x": 2, "by": "alone"}] * 5
        assert cache.stats()["lease_waits"] == 4


async def test_callers_during_a_flight_do_not_query_the_store(redis_url: str) -> None:
    pytest.importorskip("redis")
    runs: list[str] = []
    gate = asyncio.Event()
    url = f"{redis_url}?prefix=asyncache-test:flight:&{GENEROUS}"
    async with DecisionCache(open_store(url), store_timeout=STORE_TIMEOUT) as cache:
        predict = _predictor(cache, runs, gate, "one")
        first = asyncio.create_task(predict(1))
        await until(lambda: bool(runs), within=WAIT_TIMEOUT)
        reads = cache.stats()["store"]["reads"]
        later = [asyncio.create_task(predict(1)) for _ in range(20)]
        await until(lambda: cache.stats()["coalesced"] == 20, within=WAIT_TIMEOUT)
        gate.set()
        assert {r["by"] for r in await asyncio.gather(first, *later)} == {"one"}
        # They joined the running flight without a store round trip each.
        assert cache.stats()["store"]["reads"] == reads
        await cache.store.clear()


async def test_leases_without_a_lease_store_only_coalesce(caplog: pytest.LogCaptureFixture) -> None:
    runs: list[str] = []
    with caplog.at_level(logging.WARNING, logger="asyncache"):
        cache = DecisionCache(MemoryStore(), leases=True)
    assert "has no leases" in caplog.text
    async with cache:
        predict = _predictor(cache, runs, None, "only")
        assert list(await asyncio.gather(predict(1), predict(1))) == [{"x": 1, "by": "only"}] * 2
        assert runs == ["only"]


async def test_a_dead_store_never_fails_a_prediction(redis_server: RedisServer) -> None:
    pytest.importorskip("redis")
    url = f"{redis_server.url}?retries=0&socket_connect_timeout=0.5&socket_timeout=0.5"
    runs: list[str] = []
    async with DecisionCache(open_store(url), leases=True, store_timeout=2.0) as cache:

        @cached_prediction(cache, namespace="predict")
        async def predict(x: int) -> int:
            runs.append("run")
            if x == 1:
                # The store dies while this process holds the lease: add and release fail.
                redis_server.kill()
            return x * 10

        assert await predict(1) == 10
        # Now every lease step fails from the start.
        assert await predict(2) == 20
        assert runs == ["run", "run"]
        assert cache.stats()["errors"] >= 3


@pytest.mark.parametrize("store_wait", [0.0, 60.0])
async def test_store_wait_decides_what_a_miss_does_while_the_store_is_down(
    redis_server: RedisServer, store_wait: float
) -> None:
    """Two replicas (caches sharing only the store) miss the same key while Redis is down.

    Failing open (``store_wait=0``) each computes at once, and a non-deterministic
    model answers them differently. With ``store_wait`` they keep trying the
    store, and once it is back one takes the lease and computes; the other gets
    its decision: the fleet gives one answer.
    """
    pytest.importorskip("redis")
    url = f"{redis_server.url}?prefix=wait:&{GENEROUS}"
    runs: list[str] = []
    caches = [
        DecisionCache(
            open_store(url), leases=True, store_timeout=STORE_TIMEOUT, store_wait=store_wait
        )
        for _ in range(2)
    ]

    def replica(cache: DecisionCache, name: str) -> Callable[[int], Awaitable[str]]:
        @cached_prediction(cache, namespace="predict")
        async def predict(x: int) -> str:
            runs.append(name)
            return f"{name}:{os.urandom(4).hex()}"

        return predict

    predictors = [replica(cache, str(n)) for n, cache in enumerate(caches)]
    try:
        for cache in caches:
            await cache.store.get(b"\0" * 16)  # connected
        redis_server.kill()
        calls = [asyncio.create_task(predict(1)) for predict in predictors]
        # Both have found the store down (their get, and their lease, failed).
        await until(
            lambda: all(cache.stats()["errors"] >= 2 for cache in caches), within=WAIT_TIMEOUT
        )
        if store_wait:
            # Waiting for the store: nobody computed, nobody was answered.
            assert runs == [] and not any(call.done() for call in calls)
            redis_server.start()
        # Failing open, both are answered while the store is still down.
        answers = await asyncio.wait_for(asyncio.gather(*calls), WAIT_TIMEOUT)
    finally:
        for cache in caches:
            await cache.aclose()
            await cache.store.aclose()
    if store_wait:
        assert len(runs) == 1 and answers[0] == answers[1], [c.stats() for c in caches]
    else:
        assert sorted(runs) == ["0", "1"] and answers[0] != answers[1]


# -- across processes ----------------------------------------------------------


def _spawn(
    tmp_path: Path, name: str, store: str, go: Path, **options: Any
) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        "-m",
        "tests.engine.lease_worker",
        "--store",
        store,
        "--runs",
        str(tmp_path / "runs.log"),
        "--ready",
        str(tmp_path / f"{name}.ready"),
        "--go",
        str(go),
        "--out",
        str(tmp_path / f"{name}.json"),
        "--signals",
        str(tmp_path),
    ]
    for option, value in options.items():
        command += [f"--{option.replace('_', '-')}", str(value)]
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _wait_for(paths: list[Path], processes: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + CHILD_TIMEOUT
    while not all(path.exists() for path in paths):
        for process in processes:
            if process.poll() is not None:
                raise AssertionError(f"a worker exited early:\n{process.communicate()[0]}")
        if time.monotonic() > deadline:
            raise AssertionError("the workers did not get ready")
        time.sleep(0.01)


def _finish(process: subprocess.Popen[str]) -> str:
    """Wait for a worker; its output (the store failures it logged) for the failure messages."""
    try:
        output, _ = process.communicate(timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError(f"a worker hung:\n{output}") from None
    assert process.returncode == 0, output
    return output


def _runs(tmp_path: Path) -> Counter[int]:
    lines = (tmp_path / "runs.log").read_text().split()
    return Counter(int(key) for key in lines[1::2])


@pytest.fixture
def reap() -> Iterator[list[subprocess.Popen[str]]]:
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.mark.slow
def test_four_processes_compute_each_key_once(
    store_url: str, tmp_path: Path, reap: list[subprocess.Popen[str]]
) -> None:
    go = tmp_path / "go"
    names = [f"worker{i}" for i in range(4)]
    # The processes overlap for certain: a model run holds its lease until some
    # process has waited for one (the workers' --hold), however late the others
    # start on a loaded machine. The leases outlive that hold: no takeovers.
    options = {"keys": 20, "per_key": 50, "hold": 60, "lease_ttl": 120}
    reap += [_spawn(tmp_path, name, store_url, go, **options) for name in names]
    _wait_for([tmp_path / f"{name}.ready" for name in names], reap)
    go.touch()
    logged = "".join(_finish(process) for process in reap)
    reports = [json.loads((tmp_path / f"{name}.json").read_text()) for name in names]
    # A store failure computes without a lease (by design): none may happen here.
    assert all(report["stats"]["errors"] == 0 for report in reports), logged
    takeovers = sum(report["stats"]["lease_takeovers"] for report in reports)
    runs = _runs(tmp_path)
    assert set(runs) == set(range(20))
    assert all(count <= 1 + takeovers for count in runs.values()), (runs, reports, logged)
    for key in map(str, range(20)):
        # Every caller in every process got the same decision.
        nonces = {nonce for report in reports for nonce in report["decisions"][key]}
        assert len(nonces) == 1, (key, nonces)
    assert all(report["calls"] == 1000 for report in reports)
    assert sum(report["stats"]["lease_waits"] for report in reports) > 0, (reports, logged)


@pytest.mark.slow
def test_a_killed_owner_is_taken_over(
    store_url: str, tmp_path: Path, reap: list[subprocess.Popen[str]]
) -> None:
    owner_go, others_go = tmp_path / "go-owner", tmp_path / "go-others"
    # The dead owner's lease must outlive the others' start (milliseconds when
    # idle, seconds on a loaded machine); the test lasts about this long.
    lease_ttl = 10.0
    owner = _spawn(
        tmp_path, "owner", store_url, owner_go, keys=1, per_key=5, compute=600, lease_ttl=lease_ttl
    )
    others = [
        _spawn(tmp_path, name, store_url, others_go, keys=1, per_key=10, lease_ttl=lease_ttl)
        for name in ("b", "c")
    ]
    reap += [owner, *others]
    _wait_for([tmp_path / f"{name}.ready" for name in ("owner", "b", "c")], reap)
    owner_go.touch()
    # The owner holds the lease once its model runs.
    _wait_for([tmp_path / "runs.log"], reap)
    others_go.touch()
    # Both wait for the owner's lease before it dies, so that one of them takes it over.
    _wait_for([tmp_path / "waited-b", tmp_path / "waited-c"], reap)
    os.kill(owner.pid, signal.SIGKILL)
    owner.communicate()
    for process in others:
        _finish(process)
    reports = [json.loads((tmp_path / f"{name}.json").read_text()) for name in ("b", "c")]
    assert sum(report["stats"]["lease_takeovers"] for report in reports) == 1
    # The dead owner's run, then exactly one more.
    assert _runs(tmp_path) == Counter({0: 2})
    nonces = {nonce for report in reports for nonce in report["decisions"]["0"]}
    assert len(nonces) == 1
    assert all(report["stats"]["errors"] == 0 for report in reports)


@pytest.mark.slow
async def test_a_live_owner_keeps_its_lease_and_a_killed_one_costs_about_a_lease_ttl(
    store_url: str, tmp_path: Path, reap: list[subprocess.Popen[str]]
) -> None:
    """A short lease, renewed while the model runs (issue 22.14).

    Another process holds the lease on a key while its model runs (600 s); a
    caller here waits for it. While the owner lives its lease holds, five
    lease ttls and more: the owner renews it. After ``kill -9`` the lease
    ends within a ttl, and the caller here takes over and is answered.

    "Within a ttl" is read from the store, not from a clock: the lease the
    owner keeps never has more than a ttl left (each renewal sets one ttl), so
    whenever it dies its lease ends within one. How many seconds a waiter
    waits after the kill is ``benchmarks/faults.py``'s (a killed lease owner).
    """
    go = tmp_path / "go"
    owner = _spawn(tmp_path, "owner", store_url, go, keys=1, per_key=1, compute=600)
    reap.append(owner)
    await asyncio.to_thread(_wait_for, [tmp_path / "owner.ready"], reap)
    go.touch()
    # The owner's model runs once its line is written: it holds the lease.
    await asyncio.to_thread(_wait_for, [tmp_path / "runs.log"], reap)
    async with DecisionCache(
        open_store(store_url), namespace="fleet", leases=True, store_timeout=STORE_TIMEOUT
    ) as cache:
        runs: list[int] = []

        @cached_prediction(cache, namespace="predict")
        async def predict(key: int) -> dict[str, Any]:
            runs.append(key)
            return {"key": key, "pid": os.getpid()}

        waiter = asyncio.create_task(predict(0))
        await until(lambda: cache.stats()["lease_waits"] == 1, within=WAIT_TIMEOUT)
        # The owner's model has run five lease ttls (and more) by now: it kept its lease.
        await asyncio.sleep(5 * cache.lease_ttl)
        assert not waiter.done()
        assert runs == [] and cache.stats()["lease_takeovers"] == 0
        # The owner's lease is live, with at most one ttl (1 s) left: renewed, never
        # taken for long (without renewals it was taken for the old default of 10 s).
        left = await lease_seconds_left(store_url)
        assert 0 < left <= cache.lease_ttl, left
        os.kill(owner.pid, signal.SIGKILL)
        # So its lease ends within a ttl of the kill, and the caller here takes over.
        answer = await asyncio.wait_for(waiter, WAIT_TIMEOUT)
        assert answer == {"key": 0, "pid": os.getpid()}
        assert runs == [0] and cache.stats()["lease_takeovers"] == 1
    await asyncio.to_thread(owner.communicate)


# -- a released lease stays released (issue 33.1) -----------------------------


def _renewals_alive() -> list[asyncio.Task[Any]]:
    """This loop's lease renewal tasks that have not ended."""
    return [
        task
        for task in asyncio.all_tasks()
        if not task.done() and "Leases._renew" in repr(task.get_coro())
    ]


def _lose_renewal_cancellations(store: Any) -> asyncio.Event:
    """Make ``store``'s lease renewals lose a cancellation, as 3.11's ``asyncio.wait_for`` does.

    A fault no server produces on demand: on Python 3.11 ``wait_for`` (which
    redis-py wraps a command in when ``socket_timeout`` is set) returns the
    reply and drops a cancellation that lands as the reply arrives. Here every
    renewal (a lease step by a token that already holds the key) swallows a
    cancellation that lands while it is in flight, then sends its command, on
    every Python. Returns an event set once a renewal is in flight.
    """
    renewing = asyncio.Event()
    holders: set[tuple[bytes, bytes]] = set()
    for name in ("acquire_lease", "renew_lease"):
        sent = getattr(store, name, None)
        if sent is None:
            continue

        async def step(key: bytes, token: bytes, ttl: float, sent: Any = sent) -> Any:
            if (key, token) not in holders:  # taking the lease: as the store does it
                taken = await sent(key, token, ttl)
                if taken:
                    holders.add((key, token))
                return taken
            renewing.set()
            try:
                await asyncio.sleep(0.05)  # the reply on its way...
            except asyncio.CancelledError:
                pass  # ...arrives as the cancellation lands: the reply wins, the cancel is lost
            return await sent(key, token, ttl)

        setattr(store, name, step)
    return renewing


async def test_a_renewal_that_loses_its_cancellation_stops_at_the_release(
    store_url: str,
) -> None:
    """The release ends the renewal for certain, and nothing renews the lease after it."""
    store = open_store(store_url)
    renewing = _lose_renewal_cancellations(store)
    async with DecisionCache(
        store, leases=True, lease_ttl=0.3, store_timeout=STORE_TIMEOUT
    ) as cache:

        @cached_prediction(cache, namespace="predict")
        async def predict(x: int) -> int:
            # Returns (and so releases) while a renewal is in flight.
            await asyncio.wait_for(renewing.wait(), WAIT_TIMEOUT)
            return x

        assert await predict(1) == 1
        # Before: the renewal lost the release's cancellation and kept looping.
        assert _renewals_alive() == []
        # And the lease is gone: nothing renewed (or re-took) it after the release.
        await asyncio.sleep(3 * cache.lease_ttl)
        key = predict.key(1)
        assert await store.acquire_lease(key, b"someone-else", 30.0)  # type: ignore[attr-defined]
        await store.release_lease(key, b"someone-else")  # type: ignore[attr-defined]


async def test_releasing_twice_is_harmless(store_url: str) -> None:
    async with _cache(store_url, lease_ttl=0.3) as cache:
        leases = cache.engine.leases
        assert leases is not None
        start = await leases.begin(b"k")
        assert start.token is not None
        await leases.finish(b"k", start.token)
        await leases.finish(b"k", start.token)
        assert _renewals_alive() == []
        # Released: another token takes it at once.
        store = cache.store
        assert await store.acquire_lease(b"k", b"other", 30.0)  # type: ignore[attr-defined]
        # Our old token's release does not drop another holder's lease.
        await leases.finish(b"k", start.token)
        assert not await store.acquire_lease(b"k", b"third", 30.0)  # type: ignore[attr-defined]
        await store.release_lease(b"k", b"other")  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_a_renewal_never_takes_a_lease_its_token_no_longer_holds(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "redis":
        pytest.importorskip("redis")
        url = f"{request.getfixturevalue('redis_url')}?prefix="
        url += f"{request.getfixturevalue('redis_prefix')}&{GENEROUS}"
    else:
        url = f"sqlite:///{tmp_path / 'leases.sqlite'}"
    store = open_store(url)
    try:
        assert await store.acquire_lease(b"k", b"mine", 30.0)  # type: ignore[attr-defined]
        assert await store.renew_lease(b"k", b"mine", 30.0)  # type: ignore[attr-defined]
        await store.release_lease(b"k", b"mine")  # type: ignore[attr-defined]
        # A renewal that crossed the release: no lease, and none made.
        assert not await store.renew_lease(b"k", b"mine", 30.0)  # type: ignore[attr-defined]
        assert await store.acquire_lease(b"k", b"other", 30.0)  # type: ignore[attr-defined]
        # Nor does it extend another token's lease.
        assert not await store.renew_lease(b"k", b"mine", 30.0)  # type: ignore[attr-defined]
        await store.release_lease(b"k", b"other")  # type: ignore[attr-defined]
    finally:
        await store.aclose()


@pytest.mark.slow
async def test_released_leases_stay_released_under_load(redis_url: str, redis_prefix: str) -> None:
    """Issue 33's attack, scaled down: many leased flights whose models outlast a third
    of the lease's ttl (so renewals are sent as flights end), on one redis-server.

    Before (Python 3.11): leases still renewed after every flight had ended (3.11's
    ``wait_for`` lost the release's cancellation), and their keys got no answer after
    a clear. Redis-py's default ``socket_timeout`` path is the one that loses it.
    """
    pytest.importorskip("redis")
    url = f"{redis_url}?prefix={redis_prefix}&{GENEROUS}"
    keys = 600
    async with DecisionCache(
        open_store(url), leases=True, lease_ttl=0.3, store_timeout=STORE_TIMEOUT
    ) as cache:

        @cached_prediction(cache, namespace="slow")
        async def slow(x: int) -> int:
            await asyncio.sleep(0.1 + (x % 7) * 0.05)  # 0.1-0.4 s: past lease_ttl / 3
            return x

        await asyncio.gather(*(slow(i) for i in range(keys)))
        await asyncio.sleep(3 * cache.lease_ttl)
        assert len(_renewals_alive()) == 0
        assert await live_leases(redis_url, redis_prefix) == 0
        await cache.store.clear()

        async def answered(x: int) -> bool:
            try:
                async with asyncio.timeout(WAIT_TIMEOUT):  # a hang guard, not a timing
                    return await slow(x) == x
            except TimeoutError:
                return False

        answers = await asyncio.gather(*(answered(i) for i in range(keys)))
        assert answers.count(False) == 0
        await cache.store.clear()
