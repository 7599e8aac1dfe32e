"""Freshness through the middleware: stale hits, the app's own stale-* directives,
hit-for-pass.

- A stale hit is answered at once with ``X-Cache: stale`` and ``Cache-Status:
  ...; hit; fwd=stale``, and the app runs once in the background to refresh it.
- ``Cache-Control: stale-while-revalidate=N, stale-if-error=N`` on a response
  sets the windows it is kept for, capped by the settings.
- An uncacheable answer is remembered for ``pass_ttl``: identical requests in
  that time go straight to the app instead of queuing behind a run.
- Within stale-if-error, a run whose app raises or answers 500/502/503/504 is
  answered (for every request sharing it) with the stale response, ``X-Cache:
  stale`` and ``Cache-Status: ...; fwd=stale; fwd-status=503;
  detail=stale-if-error``; past the window the failure reaches the client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from asyncache import DecisionCache, MemoryStore
from asyncache.codec import decode
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.stores import DecisionStore
from asyncache.stores.sqlite import SQLiteStore

from ..stores.test_contract import store_of
from ..support import until
from . import Answer, RecordingApp, call, uvicorn_serving

TTL = 0.2


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_stale_hit_is_answered_at_once_and_refreshed_once(
    kind: str, tmp_path: Path
) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "cache.db")
    cache = DecisionCache(store, ttl=TTL, stale_while_revalidate=60)
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=cache, cache_status=True)
    first = await call(middleware, body=b'{"text": "a"}')
    assert first.cache == "miss"
    await until(lambda: cache.stats()["stores"] == 1, "the answer is stored")
    await asyncio.sleep(TTL * 1.5)
    app.gate = asyncio.Event()  # the refresh's run is held: no request may wait for it
    stale = await asyncio.wait_for(
        asyncio.gather(*(call(middleware, body=b'{"text": "a"}') for _ in range(20))), 30
    )
    assert {(r.status, r.cache, r.body) for r in stale} == {(200, "stale", first.body)}
    assert {r.header("cache-status") for r in stale} == {"asyncache; hit; fwd=stale"}
    await until(lambda: app.calls == 2, "the refresh runs the app")
    app.gate.set()
    await until(lambda: cache.stats()["stores"] == 2, "the refresh is stored")
    fresh = await call(middleware, body=b'{"text": "a"}')
    assert (fresh.cache, app.calls) == ("hit", 2)
    assert cache.stats()["stale_hits"] == 20 and cache.stats()["refreshes"] == 1
    await cache.aclose()


async def test_the_apps_stale_directives_set_the_windows_capped_by_the_settings() -> None:
    store = MemoryStore()
    cache = DecisionCache(store, ttl=60, stale_while_revalidate=100, stale_if_error=10)
    headers = [
        (b"content-type", b"application/json"),
        (b"cache-control", b"public, stale-while-revalidate=30, stale-if-error=3600"),
    ]
    app = RecordingApp(Answer(headers=headers))
    middleware = DecisionCacheMiddleware(app, cache=cache)
    await call(middleware, body=b'{"text": "b"}')
    await until(lambda: cache.stats()["stores"] == 1, "the answer is stored")
    [(key, entry)] = list(store._data.items())
    decoded = decode(entry.value, key=key)
    # 30 asked and allowed; 3600 asked, 10 allowed.
    assert (decoded.stale_while_revalidate, decoded.stale_if_error) == (30.0, 10.0)
    assert entry.expires_at is not None
    assert entry.expires_at == pytest.approx(decoded.created_at + 60 + 30 + 10)
    await cache.aclose()


async def test_the_middlewares_own_windows_override_the_caches() -> None:
    store = MemoryStore()
    cache = DecisionCache(store, ttl=60)
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=cache, stale_while_revalidate=20)
    await call(middleware, body=b'{"text": "c"}')
    await until(lambda: cache.stats()["stores"] == 1, "the answer is stored")
    [(key, entry)] = list(store._data.items())
    assert decode(entry.value, key=key).stale_while_revalidate == 20.0
    assert entry.expires_at is not None and entry.expires_at - time.time() > 70
    await cache.aclose()


async def test_hit_for_pass_sends_followers_of_a_private_answer_straight_to_the_app() -> None:
    cache = DecisionCache()
    private = [(b"content-type", b"application/json"), (b"cache-control", b"private")]
    app = RecordingApp(Answer(headers=private))
    middleware = DecisionCacheMiddleware(app, cache=cache, pass_ttl=60)
    async with uvicorn_serving(middleware) as url, httpx.AsyncClient(base_url=url) as client:
        first = await client.post("/", json={"text": "d"})
        assert first.headers["x-cache"] == "miss"
        # The answer was private: the next identical requests do not queue behind a run;
        # each goes to the app at once, all of them in the app together.
        app.gate = asyncio.Event()
        requests = [asyncio.create_task(client.post("/", json={"text": "d"})) for _ in range(5)]
        await until(lambda: app.entered == 6, "every request reached the app")
        app.gate.set()
        answers = await asyncio.gather(*requests)
    assert {r.headers["x-cache"] for r in answers} == {"miss"}
    assert cache.stats()["passes"] == 5
    assert cache.stats()["coalesced"] == 0
    await cache.aclose()


async def test_without_hit_for_pass_followers_queue_behind_the_run() -> None:
    # The counterpart: pass_ttl=0 remembers nothing, so a second wave joins one run and
    # only learns when it ends that the answer was not theirs to share.
    cache = DecisionCache()
    private = [(b"content-type", b"application/json"), (b"cache-control", b"private")]
    app = RecordingApp(Answer(headers=private))
    middleware = DecisionCacheMiddleware(app, cache=cache, pass_ttl=0)
    await call(middleware, body=b'{"text": "e"}')
    app.gate = asyncio.Event()
    requests = [asyncio.create_task(call(middleware, body=b'{"text": "e"}')) for _ in range(5)]
    await until(lambda: app.entered == 2, "one run started")
    await asyncio.sleep(0.05)
    assert app.entered == 2  # the others wait on that run
    app.gate.set()
    await asyncio.gather(*requests)
    assert cache.stats()["passes"] == 0
    await cache.aclose()


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DecisionStore]:
    async with store_of(request.param, request, tmp_path) as made:
        yield made


class FlakyApp(RecordingApp):
    """Answers as ``RecordingApp`` does, or raises before its start message (``raises``)."""

    raises = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not self.raises:
            await super().__call__(scope, receive, send)
            return

        async def failing(message: Any) -> None:
            raise RuntimeError("the model is down")

        await super().__call__(scope, receive, failing)


def fail(app: FlakyApp, failure: str) -> None:
    if failure == "raises":
        app.raises = True
    else:
        app.answer = Answer(status=503, chunks=[b"down"])


SIE_STATUS = {
    "raises": "asyncache; fwd=stale; detail=stale-if-error",
    "503": "asyncache; fwd=stale; fwd-status=503; detail=stale-if-error",
}


@pytest.mark.parametrize("failure", ["raises", "503"])
async def test_stale_if_error_answers_a_failed_run_with_the_stale_response(
    store: DecisionStore, failure: str
) -> None:
    cache = DecisionCache(store, ttl=TTL, stale_if_error=60, store_timeout=30)
    app = FlakyApp()
    # A follower waits for the held run however long it takes: it shares that run.
    middleware = DecisionCacheMiddleware(app, cache=cache, cache_status=True, follower_timeout=60)
    first = await call(middleware, body=b'{"text": "f"}')
    assert first.cache == "miss"
    await until(lambda: cache.stats()["stores"] == 1, "the answer is stored")
    await asyncio.sleep(TTL * 1.5)
    fail(app, failure)
    app.gate = asyncio.Event()
    leader = asyncio.create_task(call(middleware, body=b'{"text": "f"}'))
    await until(lambda: app.entered == 2, "the run started")
    follower = asyncio.create_task(call(middleware, body=b'{"text": "f"}'))
    await until(lambda: cache.stats()["coalesced"] == 1, "the follower shares the run")
    app.gate.set()
    answers = await asyncio.wait_for(asyncio.gather(leader, follower), 30)
    for answer in answers:
        assert (answer.status, answer.body, answer.cache) == (200, first.body, "stale")
        assert answer.header("cache-status") == SIE_STATUS[failure]
    assert app.calls == 2
    assert cache.stats()["stale_if_error_hits"] == 2
    await cache.aclose()


async def test_stale_if_error_over_http_answers_a_503_with_the_stale_response(
    tmp_path: Path,
) -> None:
    cache = DecisionCache(SQLiteStore(tmp_path / "cache.db"), ttl=TTL, stale_if_error=60)
    app = FlakyApp()
    middleware = DecisionCacheMiddleware(app, cache=cache, cache_status=True)
    async with uvicorn_serving(middleware) as url, httpx.AsyncClient(base_url=url) as client:
        first = await client.post("/", json={"text": "g"})
        await until(lambda: cache.stats()["stores"] == 1, "the answer is stored")
        await asyncio.sleep(TTL * 1.5)
        fail(app, "503")
        stale = await client.post("/", json={"text": "g"})
        # A success replaces the entry, as any miss's answer does.
        app.answer = Answer(chunks=[b'{"label":"new"}'])
        await asyncio.sleep(TTL * 1.5)
        fresh = await client.post("/", json={"text": "g"})
        again = await client.post("/", json={"text": "g"})
    assert (stale.status_code, stale.content) == (200, first.content)
    assert stale.headers["x-cache"] == "stale"
    assert stale.headers["cache-status"] == SIE_STATUS["503"]
    assert (fresh.status_code, fresh.content, fresh.headers["x-cache"]) == (
        200,
        b'{"label":"new"}',
        "miss",
    )
    assert (again.content, again.headers["x-cache"]) == (b'{"label":"new"}', "hit")
    assert cache.stats()["stale_if_error_hits"] == 1
    await cache.aclose()


@pytest.mark.parametrize("window", ["the_settings", "the_apps_own"])
@pytest.mark.parametrize("failure", ["raises", "503"])
async def test_stale_if_error_ends_with_its_window_and_the_failure_reaches_the_client(
    store: DecisionStore, failure: str, window: str
) -> None:
    if window == "the_settings":
        cache = DecisionCache(store, ttl=TTL, stale_if_error=1, store_timeout=30)
        app = FlakyApp()
    else:
        # The settings allow a minute; the app's own answer asks for a second.
        cache = DecisionCache(store, ttl=TTL, stale_if_error=60, store_timeout=30)
        headers = [
            (b"content-type", b"application/json"),
            (b"cache-control", b"public, stale-if-error=1"),
        ]
        app = FlakyApp(Answer(headers=headers))
    middleware = DecisionCacheMiddleware(app, cache=cache, cache_status=True)
    first = await call(middleware, body=b'{"text": "h"}')
    assert first.cache == "miss"
    await until(lambda: cache.stats()["stores"] == 1, "the answer is stored")
    await asyncio.sleep(TTL + 1 + 0.3)  # past the ttl and the window
    fail(app, failure)
    if failure == "raises":
        with pytest.raises(RuntimeError, match="the model is down"):
            await call(middleware, body=b'{"text": "h"}')
    else:
        answer = await call(middleware, body=b'{"text": "h"}')
        assert (answer.status, answer.body, answer.cache) == (503, b"down", "miss")
    assert app.calls == 2
    assert cache.stats()["stale_if_error_hits"] == 0
    await cache.aclose()


@pytest.mark.parametrize("failure", ["raises", "503"])
async def test_every_request_sharing_a_failed_run_in_process_is_labelled_stale(
    failure: str,
) -> None:
    # Requests that all looked the key up before the run was listed follow it through the
    # engine, not its stream: they were labelled `hit` (7 of 8 over httpx's ASGITransport).
    cache = DecisionCache(MemoryStore(), ttl=TTL, stale_if_error=60, store_timeout=30)
    app = FlakyApp()
    middleware = DecisionCacheMiddleware(app, cache=cache, cache_status=True, follower_timeout=60)
    transport = httpx.ASGITransport(app=middleware)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        first = await client.post("/", json={"text": "s"})
        await until(lambda: cache.stats()["stores"] == 1, "the answer is stored")
        await asyncio.sleep(TTL * 1.5)
        fail(app, failure)
        app.gate = asyncio.Event()
        requests = [asyncio.create_task(client.post("/", json={"text": "s"})) for _ in range(8)]
        await until(lambda: cache.stats()["coalesced"] == 7, "seven requests share the run")
        app.gate.set()
        answers = await asyncio.wait_for(asyncio.gather(*requests), 30)
    assert [(a.status_code, a.content) for a in answers] == [(200, first.content)] * 8
    assert [a.headers["x-cache"] for a in answers] == ["stale"] * 8
    assert {a.headers["cache-status"] for a in answers} == {SIE_STATUS[failure]}
    assert app.calls == 2
    assert cache.stats()["stale_if_error_hits"] == 8
    await cache.aclose()
