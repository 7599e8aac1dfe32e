"""The engine under trio: coalescing, shared failures, hits and the middleware.

Starlette and FastAPI run on anyio, so a cache may be awaited under trio
(``TestClient(backend="trio")``, hypercorn's trio worker). Each test runs its
own ``trio.run``. The cache uses a ``MemoryStore`` or a ``SQLiteStore`` (on
aiosqlite's connections, which it reaches under trio through anyio's worker
threads: docs/stores.md); a ``RedisStore`` (redis-py is asyncio's alone)
refuses trio at once with a ``ConfigurationError``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from asyncache import DecisionCache, cached_prediction
from asyncache.errors import ConfigurationError
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.stores import Entry

CALLERS = 20


def test_identical_concurrent_misses_run_the_model_once_under_trio() -> None:
    runs = 0

    async def main() -> list[str]:
        cache = DecisionCache(ttl=3600, renew_on_hit=True)

        @cached_prediction(cache)
        async def predict(text: str) -> str:
            nonlocal runs
            runs += 1
            await trio.sleep(0.05)
            return text.upper()

        answers: list[str] = []

        async def ask() -> None:
            answers.append(await predict("x"))

        async with trio.open_nursery() as nursery:
            for _ in range(CALLERS):
                nursery.start_soon(ask)
        answers.append(await predict("x"))  # a hit
        assert cache.stats()["coalesced"] >= 1 and cache.stats()["hits"] >= 1
        await cache.aclose()
        return answers

    assert trio.run(main) == ["X"] * (CALLERS + 1)
    assert runs == 1


def test_followers_share_a_failure_under_trio() -> None:
    runs = 0

    async def main() -> list[BaseException]:
        cache = DecisionCache()

        @cached_prediction(cache)
        async def predict(text: str) -> str:
            nonlocal runs
            runs += 1
            await trio.sleep(0.05)
            raise ValueError("the model failed")

        failures: list[BaseException] = []

        async def ask() -> None:
            try:
                await predict("x")
            except ValueError as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            for _ in range(CALLERS):
                nursery.start_soon(ask)
        await cache.aclose()
        return failures

    assert len(trio.run(main)) == CALLERS
    assert runs == 1


def test_a_waiter_that_times_out_computes_by_itself_under_trio() -> None:
    runs = 0

    async def main() -> list[str]:
        cache = DecisionCache(coalesce_timeout=0.05)

        @cached_prediction(cache)
        async def predict(text: str) -> str:
            nonlocal runs
            runs += 1
            await trio.sleep(0.3 if runs == 1 else 0)
            return text.upper()

        answers: list[str] = []

        async def ask() -> None:
            answers.append(await predict("x"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await trio.sleep(0.01)
            nursery.start_soon(ask)
        assert cache.stats()["coalesce_timeouts"] == 1
        await cache.aclose()
        return answers

    assert trio.run(main) == ["X", "X"]
    assert runs == 2


@pytest.mark.parametrize("requests", [CALLERS])
def test_the_middleware_runs_the_app_once_for_identical_requests_under_trio(
    requests: int,
) -> None:
    runs = 0

    async def predict(request: Request) -> JSONResponse:
        nonlocal runs
        runs += 1
        body = await request.json()
        await trio.sleep(0.05)
        return JSONResponse({"label": body["text"].upper()})

    async def main() -> list[tuple[int, str, Any]]:
        cache = DecisionCache()
        app = DecisionCacheMiddleware(
            Starlette(routes=[Route("/predict", predict, methods=["POST"])]),
            cache=cache,
            routes=["/predict"],
        )
        seen: list[tuple[int, str, Any]] = []
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:

            async def ask() -> None:
                response = await client.post("/predict", json={"text": "refund"})
                seen.append((response.status_code, response.headers["x-cache"], response.json()))

            async with trio.open_nursery() as nursery:
                for _ in range(requests):
                    nursery.start_soon(ask)
            await ask()  # a hit
        await cache.aclose()
        return seen

    seen = trio.run(main)
    assert runs == 1
    assert {(status, body["label"]) for status, _, body in seen} == {(200, "REFUND")}
    assert sorted({cache for _, cache, _ in seen}) == ["hit", "miss", "shared"]


# -- persistent stores under trio -------------------------------------------------


def test_sqlite_store_answers_every_call_under_trio(tmp_path: Path) -> None:
    from asyncache.stores.sqlite import SQLiteStore

    path = tmp_path / "cache.db"
    k1, k2, k3, k4 = (bytes([i]) * 16 for i in range(1, 5))

    async def main() -> None:
        async with SQLiteStore(path, prune_interval=None) as store:
            assert await store.add(k1, b"one", None) == Entry(b"one", None)
            assert await store.add(k1, b"late", None) == Entry(b"one", None)  # first wins
            assert await store.get(k1) == Entry(b"one", None)
            assert await store.get(k4) is None
            winners = await store.add_many([(k2, b"two", None), (k3, b"three", 1.0)])
            assert [entry.value for entry in winners] == [b"two", b"three"]
            assert await store.get_many([k1, k2, k3, k4]) == [
                Entry(b"one", None),
                Entry(b"two", None),
                None,  # k3 expired in 1970
                None,
            ]
            # Concurrent gets and adds, as a nursery of callers makes them.
            found: list[Entry | None] = []

            async def get(key: bytes) -> None:
                found.append(await store.get(key))

            async with trio.open_nursery() as nursery:
                for _ in range(CALLERS):
                    nursery.start_soon(get, k1)
                    nursery.start_soon(store.add, k4, b"four", None)
            assert found == [Entry(b"one", None)] * CALLERS
            assert await store.get(k4) == Entry(b"four", None)
            assert await store.renew(k2, 4e9) is True
            assert await store.get(k2) == Entry(b"two", 4e9)
            await store.delete(k2)
            assert await store.get(k2) is None
            assert await store.count() == 3  # k1, k4, and k3 until pruned
            assert await store.prune() == 1
            assert await store.count() == 2
            facts = await store.describe()
            assert facts["live"] == 2 and facts["expired"] == 0
            # Leases: taken once, waited on, released.
            assert await store.acquire_lease(k3, b"me", 30) is True
            assert await store.acquire_lease(k3, b"you", 30) is False
            assert await store.wait_for_entry(k3, 0.05) is None  # leased, nothing yet
            await store.release_lease(k3, b"me")
            assert await store.acquire_lease(k3, b"you", 30) is True
        # What the first run stored is in the file for the next one.
        async with SQLiteStore(path, prune_interval=None) as store:
            assert await store.get(k1) == Entry(b"one", None)
            await store.clear()
            assert await store.count() == 0

    trio.run(main)


def test_sqlite_store_prunes_in_the_background_under_trio(tmp_path: Path) -> None:
    from asyncache.stores.sqlite import SQLiteStore

    async def main() -> int:
        store = SQLiteStore(tmp_path / "cache.db", prune_interval=0.02)
        await store.add(bytes(16), b"soon gone", time.time() + 0.05)
        for _ in range(2000):  # bounded: fails instead of hanging
            if store.pruned:
                break
            await trio.sleep(0.01)
        await store.aclose()
        return store.pruned

    assert trio.run(main) == 1


def test_a_cache_over_sqlite_keeps_decisions_under_trio(tmp_path: Path) -> None:
    from asyncache.stores.sqlite import SQLiteStore

    runs = 0

    async def main() -> tuple[list[str], dict[str, Any]]:
        cache = DecisionCache(SQLiteStore(tmp_path / "cache.db"), ttl=3600, leases=True)

        @cached_prediction(cache)
        async def predict(text: str) -> str:
            nonlocal runs
            runs += 1
            await trio.sleep(0.05)
            return text.upper()

        answers: list[str] = []

        async def ask() -> None:
            answers.append(await predict("x"))

        async with trio.open_nursery() as nursery:
            for _ in range(CALLERS):
                nursery.start_soon(ask)
        stats = cache.stats()
        await cache.aclose()
        await cache.store.aclose()
        return answers, stats

    answers, stats = trio.run(main)
    assert answers == ["X"] * CALLERS and runs == 1
    assert stats["errors"] == 0 and stats["stores"] == 1
    # A second run (a restarted process) finds the decision in the file.
    answers, stats = trio.run(main)
    assert answers == ["X"] * CALLERS and runs == 1
    assert stats["errors"] == 0 and stats["hits"] >= 1


@pytest.mark.redis
def test_redis_store_refuses_trio_at_once(redis_url: str) -> None:
    pytest.importorskip("redis")
    from asyncache.stores.redis import RedisStore

    async def made_under_trio() -> None:
        RedisStore.from_url(redis_url)

    with pytest.raises(ConfigurationError, match="asyncio") as raised:
        trio.run(made_under_trio)
    assert "trio" in str(raised.value)

    # Made outside any loop (at import time), then used under trio: the first call says so.
    store = RedisStore.from_url(redis_url)
    cache = DecisionCache(store)
    runs = 0

    @cached_prediction(cache)
    async def predict(text: str) -> str:
        nonlocal runs
        runs += 1
        return text.upper()

    async def used_under_trio() -> None:
        with pytest.raises(ConfigurationError, match="trio"):
            await store.get(bytes(16))
        with pytest.raises(ConfigurationError, match="trio"):
            await predict("x")
        await cache.aclose()
        await store.aclose()  # closing says nothing: there is nothing to close

    trio.run(used_under_trio)
    assert cache.stats()["errors"] == 0


def test_a_sync_function_offloaded_to_threads_computes_under_trio() -> None:
    # Issue 31: offload="thread" ran on asyncio's run_in_executor, so under trio a miss
    # raised "RuntimeError: no running event loop". The pool is awaited through anyio.
    runs = 0

    async def main() -> list[str]:
        cache = DecisionCache(ttl=3600)

        @cached_prediction(cache, offload="thread")
        def predict(text: str) -> str:
            nonlocal runs
            runs += 1
            time.sleep(0.01)  # on a pool thread, not the loop
            return text.upper()

        answers = [await predict("x"), await predict("y"), await predict("x")]
        await cache.aclose()
        return answers

    assert trio.run(main) == ["X", "Y", "X"]
    assert runs == 2
