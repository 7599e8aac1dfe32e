"""Identical concurrent requests run the app once, and share only what was admitted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware, cache_stats

from ..support import until
from . import Answer, RecordingApp, Result, call

FOLLOWERS = 4


async def stampede(
    middleware: DecisionCacheMiddleware,
    app: RecordingApp,
    *,
    leader_options: dict[str, Any] | None = None,
) -> tuple[asyncio.Task[Result], list[asyncio.Task[Result]]]:
    """Start a leader that blocks in the app, then followers that wait on it."""
    app.gate = asyncio.Event()
    leader = asyncio.create_task(call(middleware, body=b'{"q": 1}', **(leader_options or {})))
    await until(lambda: app.entered == 1, "the leader is in the app")
    followers = [asyncio.create_task(call(middleware, body=b'{"q":1}')) for _ in range(FOLLOWERS)]
    cache = middleware.cache
    await until(lambda: cache.stats()["coalesced"] == FOLLOWERS, "the followers wait")
    assert app.entered == 1
    return leader, followers


async def test_identical_requests_run_the_app_once() -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    leader, followers = await stampede(middleware, app)
    assert app.gate is not None
    app.gate.set()
    first = await leader
    shared = await asyncio.gather(*followers)
    assert app.calls == 1
    assert first.cache == "miss"
    assert [r.cache for r in shared] == ["shared"] * FOLLOWERS
    assert {r.body for r in shared} == {first.body}
    # Each follower gets what the leader's client got, as the app sent it.
    assert {r.header("content-length") for r in shared} == {first.header("content-length")}
    assert cache_stats(middleware.cache)["middleware"]["shared"] == FOLLOWERS
    assert middleware.cache.stats()["in_flight"] == 0


async def test_followers_do_not_get_a_response_that_was_not_admitted() -> None:
    app = RecordingApp(
        Answer(headers=[(b"content-type", b"application/json"), (b"set-cookie", b"sid=alice")])
    )
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    leader, followers = await stampede(middleware, app)
    assert app.gate is not None
    app.gate.set()
    await leader
    others = await asyncio.gather(*followers)
    # Each follower ran the app itself: nobody got alice's cookie but alice.
    assert app.calls == 1 + FOLLOWERS
    assert [r.cache for r in others] == ["miss"] * FOLLOWERS
    assert await middleware.cache.store.count() == 0


async def test_followers_of_a_5xx_run_the_app_themselves() -> None:
    # A 5xx may be the leader's own failure (its quota, its throttling): the followers
    # are released to run the app, as for any answer the cache would not store.
    app = RecordingApp(Answer(status=503, chunks=[b'{"error": "overloaded"}']))
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    leader, followers = await stampede(middleware, app)
    assert app.gate is not None
    app.gate.set()
    assert (await leader).status == 503
    others = await asyncio.gather(*followers)
    assert app.calls == 1 + FOLLOWERS
    assert {(r.status, r.cache) for r in others} == {(503, "miss")}
    assert await middleware.cache.store.count() == 0
    assert middleware.stats.not_admitted_reasons == {"failure": 1 + FOLLOWERS}
    app.gate = None
    assert (await call(middleware, body=b'{"q": 1}')).cache == "miss"
    assert app.calls == 2 + FOLLOWERS


class FailingOnce(RecordingApp):
    """Raises in its first call, after reading the body; answers afterwards."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.calls == 0:
            self.calls += 1
            await receive()
            self.entered += 1
            assert self.gate is not None
            await self.gate.wait()
            raise RuntimeError("the model crashed")
        await super().__call__(scope, receive, send)


async def test_followers_of_a_leader_that_raises_run_the_app_themselves() -> None:
    # The leader's failure stays with the leader's client: each follower runs the app
    # (which answers them), and what they get may be stored.
    app = FailingOnce()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    leader, followers = await stampede(middleware, app)
    assert app.gate is not None
    app.gate.set()
    with pytest.raises(RuntimeError, match="crashed"):
        await leader
    others = await asyncio.gather(*followers)
    assert {(r.status, r.body) for r in others} == {(200, b'{"label":"positive"}')}
    assert {r.cache for r in others} <= {"miss", "hit"}
    assert app.calls >= 2


async def test_a_leader_whose_client_left_still_serves_its_followers() -> None:
    app = RecordingApp(Answer(chunks=[b'{"label":', b' "positive"}']))
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    leader, followers = await stampede(
        middleware, app, leader_options={"disconnect_after_start": True}
    )
    assert app.gate is not None
    app.gate.set()
    gone = await leader  # no exception reaches the server: the app finished normally
    assert gone.body == b""
    shared = await asyncio.gather(*followers)
    assert app.calls == 1
    assert {r.body for r in shared} == {b'{"label": "positive"}'}
    assert {r.cache for r in shared} == {"shared"}


async def test_a_cancelled_leader_request_neither_hangs_nor_loses_the_work() -> None:
    # The app runs as the flight's work, not as the leader's request: cancelling the
    # request (a server that cancels on disconnect) leaves the followers their answer.
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    leader, followers = await stampede(middleware, app)
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    assert app.gate is not None
    app.gate.set()
    others = await asyncio.gather(*followers)
    assert {r.status for r in others} == {200}
    assert {r.cache for r in others} == {"shared"}
    assert app.calls == 1
    assert middleware.cache.stats()["in_flight"] == 0


async def test_a_follower_that_waited_too_long_runs_the_app_itself() -> None:
    app = RecordingApp()
    cache = DecisionCache(coalesce_timeout=0.01)
    middleware = DecisionCacheMiddleware(app, cache=cache)
    app.gate = asyncio.Event()
    leader = asyncio.create_task(call(middleware, body=b"{}"))
    await until(lambda: app.entered == 1, "the leader is in the app")
    follower = asyncio.create_task(call(middleware, body=b"{}"))
    await until(lambda: app.entered == 2, "the follower gave up waiting")
    app.gate.set()
    results = [await leader, await follower]
    assert [r.cache for r in results] == ["miss", "miss"]
    assert cache.stats()["coalesce_timeouts"] == 1


async def test_different_requests_and_disabled_coalescing_run_apart() -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    app.gate = asyncio.Event()
    tasks = [asyncio.create_task(call(middleware, body=b'{"q": %d}' % i)) for i in range(3)]
    await until(lambda: app.entered == 3, "three different requests are in the app")
    app.gate.set()
    await asyncio.gather(*tasks)

    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache(coalesce=False))
    app.gate = asyncio.Event()
    tasks = [asyncio.create_task(call(middleware, body=b"{}")) for _ in range(3)]
    await until(lambda: app.entered == 3, "three identical requests are in the app")
    app.gate.set()
    results = await asyncio.gather(*tasks)
    assert {r.cache for r in results} == {"miss"}
    assert (await call(middleware, body=b"{}")).cache == "hit"


async def test_a_run_whose_add_lost_answers_with_the_stored_decision() -> None:
    """Two processes (two caches over one store, no leases) run the app for one request;
    the later run's client and its followers get the answer stored first, headers and
    all, not their own run's."""
    from asyncache.stores.memory import MemoryStore

    store = MemoryStore()
    gate = asyncio.Event()

    def app_answering(answer: bytes, *, waits: bool) -> Any:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            await receive()
            if waits:
                await gate.wait()
            headers = [(b"content-type", b"text/plain"), (b"x-run", answer)]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": answer})

        return app

    slow_cache, fast_cache = DecisionCache(store), DecisionCache(store)
    slow = DecisionCacheMiddleware(app_answering(b"slow", waits=True), cache=slow_cache)
    fast = DecisionCacheMiddleware(app_answering(b"fast", waits=False), cache=fast_cache)
    leader = asyncio.create_task(call(slow, body=b'{"q": 1}'))
    followers = [asyncio.create_task(call(slow, body=b'{"q": 1}')) for _ in range(FOLLOWERS)]
    await until(lambda: slow_cache.stats()["coalesced"] == FOLLOWERS, "the followers wait")
    first = await call(fast, body=b'{"q": 1}')
    gate.set()
    results = [await leader, *await asyncio.gather(*followers)]
    assert first.cache == "miss"
    assert {dict(r.headers)[b"x-run"] for r in [first, *results]} == {b"fast"}
    assert {r.body for r in results} == {b"fast"}
    assert [r.cache for r in results] == ["miss"] + ["shared"] * FOLLOWERS
    assert slow_cache.stats()["conflicts"] == 1
